//! A deterministic, realistic Chrome user-data-dir for the profile benchmarks, shared by
//! `benches/profile.rs` and `examples/profilebench.rs`.
//!
//! The layout follows a real desktop profile after some weeks of use (current Chromium file
//! names); the content imitates each file kind closely enough that deflate sees what it would
//! see on a real profile. At the default 100 MiB (seed 42), with deflate level 1 per part
//! (`profilebench gen --ratios`):
//!
//! | share | part | looks like | deflate -1 |
//! |---|---|---|---|
//! | 38 % | SQLite: `History` (22 MiB), `Favicons` (PNG blobs in a third of the rows), `Web Data`, `Network/Cookies` (encrypted values), `Network Action Predictor`, `Login Data`, `Shortcuts`, `Top Sites`, 11 small ones, 7 empty `-journal`s | 4 KiB b-tree leaf pages 60-95 % full (header, cell pointers, zero gap, records packed at the end) of URLs and titles picked with a strong skew from a few hundred pages, big-endian times and counters; 5 % free pages | History 3.6x, Web Data 2.9x, small ones 3.3x, Cookies 2.1x, Favicons 1.8x |
//! | 24 % | LevelDB: `Local Storage`, `Session Storage` (UTF-16 JSON values), five `IndexedDB` origins, `Service Worker/Database`, `shared_proto_db`, extension settings and 10 small stores | `.log`: 32 KiB blocks of 7-byte-header records holding write batches; `.ldb`: prefix-compressed keys, ~4 KiB blocks with restarts and trailers, a third of IndexedDB values already compressed (random); `CURRENT`, `LOG`, `LOG.old`, `MANIFEST-000001`, `LOCK` | Local/Session Storage 4.8x, IndexedDB 1.5x |
//! | 23 % | IndexedDB blob files, 200 of them, log-uniform 17 KiB..1.5 MiB | random bytes | 1x |
//! | 15 % | 4 extensions (264 files: `manifest.json`, `_locales/*/messages.json`, scripts, PNG icons), Service Worker script cache, `Preferences`, `Bookmarks`, `Local State`, `Sessions`, `Visited Links`, `ZxcvbnData` word lists, `File System` data | JSON and script text from a small vocabulary, URLs, numbers; random bytes for images and file data | 2.1-2.6x |
//!
//! About a third of the bytes are incompressible (blobs, images, compressed values). The
//! archived part is 697 files in 246 directories, most of them small (extension files, LevelDB
//! bookkeeping, blobs); the whole archive shrinks about 1.86x (104.9 MB -> 56.4 MB).
//!
//! Also written, and left out by the packer (so not counted as archived bytes): caches
//! (`Default/Cache`, `Default/Code Cache`, `Default/GPUCache`), `BrowserMetrics`, `Crashpad`,
//! `Safe Browsing` (9 % on top), the `SingletonLock`/`SingletonCookie` links and LevelDB `LOCK`
//! files. Files up to 16 KiB keep their size at any `archived_bytes`; bigger ones scale.
//!
//! The files are look-alikes, not valid databases: a Chrome started on this profile resets the
//! SQLite and LevelDB stores it opens at startup (`History`, `Web Data`, `Local Storage`,
//! `Sessions`, ...) and keeps the rest (IndexedDB, Favicons, Cookies, extensions), about 58 %.
//!
//! Everything derives from the seed: the same seed and size give the same bytes.

#![allow(dead_code)]

use std::fs;
use std::io::{self, Write};
use std::path::Path;

/// What was written.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Generated {
    /// Bytes of files the packer archives (the "profile data").
    pub archived_bytes: u64,
    /// Files the packer archives.
    pub archived_files: u64,
    /// Bytes in caches and other files the packer leaves out.
    pub excluded_bytes: u64,
    pub directories: u64,
    pub symlinks: u64,
}

/// The default profile size: 100 MiB of archived data.
pub(crate) const DEFAULT_BYTES: u64 = 100 << 20;

/// Files up to this size keep their size at any scale; bigger ones scale.
const SMALL: u64 = 16 * 1024;

/// Writes the profile into `root` (created if needed; should be empty). `archived_bytes` is
/// the size of the archived part; the proportions stay the same at any size.
pub(crate) fn generate(root: &Path, seed: u64, archived_bytes: u64) -> io::Result<Generated> {
    let plan = plan(seed);
    let archived = plan.iter().filter(|f| f.archived);
    let small: u64 = archived
        .clone()
        .map(|f| f.size)
        .filter(|s| *s <= SMALL)
        .sum();
    let big: u64 = archived.map(|f| f.size).filter(|s| *s > SMALL).sum();
    let scale = archived_bytes.saturating_sub(small) as f64 / big as f64;
    let mut g = Generated::default();
    fs::create_dir_all(root)?;
    for (i, f) in plan.iter().enumerate() {
        let path = root.join(&f.path);
        if let Some(parent) = path.parent()
            && !parent.exists()
        {
            fs::create_dir_all(parent)?;
        }
        match &f.kind {
            Kind::Dir => {
                fs::create_dir_all(&path)?;
                continue;
            }
            Kind::Symlink(target) => {
                std::os::unix::fs::symlink(target, &path)?;
                g.symlinks += 1;
                continue;
            }
            _ => {}
        }
        // Small bookkeeping files keep their size; the bulk scales.
        let size = if f.size <= SMALL {
            f.size
        } else {
            (f.size as f64 * scale) as u64
        };
        let mut rng = Rng::new(seed ^ (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
        let data = content(&f.kind, size as usize, &mut rng);
        let mut file = fs::File::create(&path)?;
        file.write_all(&data)?;
        if f.archived {
            g.archived_bytes += data.len() as u64;
            g.archived_files += 1;
        } else {
            g.excluded_bytes += data.len() as u64;
        }
    }
    g.directories = count_dirs(root)?;
    Ok(g)
}

fn count_dirs(p: &Path) -> io::Result<u64> {
    let mut n = 0;
    for e in fs::read_dir(p)? {
        let e = e?;
        if e.file_type()?.is_dir() {
            n += 1 + count_dirs(&e.path())?;
        }
    }
    Ok(n)
}

// ---------------------------------------------------------------------------------------------
// The plan: every file with its kind and nominal size.

#[derive(Debug, Clone)]
enum Kind {
    Dir,
    Symlink(&'static str),
    Empty,
    Literal(&'static str),
    Sqlite(Table),
    LevelDbLog(Values),
    LevelDbTable(Values),
    LevelDbCurrent,
    LevelDbLogText,
    LevelDbManifest,
    Random,
    Png,
    Json,
    Script,
    Words,
    Sessions,
    VisitedLinks,
}

/// What the rows of a SQLite file look like.
#[derive(Debug, Clone, Copy)]
enum Table {
    /// `urls` and `visits`: URLs, titles, counters, times.
    History,
    /// `favicon_bitmaps`: page URLs plus PNG blobs (half the bytes incompressible).
    Favicons,
    /// `cookies`: hosts, names, 40-80 byte encrypted values.
    Cookies,
    /// `autofill`, `keywords`, logins: names, values, URLs, times.
    Generic,
}

/// What the values of a LevelDB store look like.
#[derive(Debug, Clone, Copy)]
enum Values {
    /// Local/Session Storage: UTF-16 strings (every other byte zero).
    Utf16,
    /// IndexedDB / protos: structured-clone records, part already compressed.
    Structured,
}

struct FileSpec {
    path: String,
    kind: Kind,
    size: u64,
    archived: bool,
}

const KIB: u64 = 1024;
const MIB: u64 = 1024 * 1024;

const EXTENSION_IDS: [&str; 4] = [
    "cjpalhdlnbpafiamejdnhcphjbkeiagm",
    "nngceckbapebfimnlniiiahkandclblb",
    "gighmmpiobklfepjocnamgkkbiglidom",
    "aapbdbdomjkkjkaonfhkkikfgjllcleb",
];

const IDB_ORIGINS: [(&str, u64, u64, u64); 5] = [
    // origin, leveldb bytes, blob bytes, blob count
    ("https_mail.example.com_0", 5632 * KIB, 8 * MIB, 60),
    ("https_docs.example.org_0", 3 * MIB, 6 * MIB, 40),
    ("https_app.example.net_0", 2 * MIB, 4 * MIB, 30),
    ("https_www.example.io_0", 512 * KIB, 2 * MIB, 20),
    ("https_maps.example.com_0", MIB, 4 * MIB + 512 * KIB, 50),
];

fn plan(seed: u64) -> Vec<FileSpec> {
    let mut rng = Rng::new(seed ^ 0x5EED);
    let mut p: Vec<FileSpec> = Vec::new();
    fn file(p: &mut Vec<FileSpec>, path: &str, kind: Kind, size: u64) {
        p.push(FileSpec {
            path: path.to_owned(),
            kind,
            size,
            archived: true,
        })
    }
    fn excluded(p: &mut Vec<FileSpec>, path: &str, kind: Kind, size: u64) {
        p.push(FileSpec {
            path: path.to_owned(),
            kind,
            size,
            archived: false,
        })
    }
    // A LevelDB directory: bookkeeping plus the given data files.
    fn leveldb(p: &mut Vec<FileSpec>, dir: &str, v: Values, log: u64, tables: &[u64]) {
        let mut push = |path: String, kind: Kind, size: u64, archived: bool| {
            p.push(FileSpec {
                path,
                kind,
                size,
                archived,
            })
        };
        push(format!("{dir}/CURRENT"), Kind::LevelDbCurrent, 16, true);
        push(format!("{dir}/LOCK"), Kind::Empty, 0, false);
        push(format!("{dir}/LOG"), Kind::LevelDbLogText, 2 * KIB, true);
        push(format!("{dir}/LOG.old"), Kind::LevelDbLogText, 1200, true);
        push(
            format!("{dir}/MANIFEST-000001"),
            Kind::LevelDbManifest,
            (64 + 40 * tables.len()) as u64,
            true,
        );
        push(format!("{dir}/000003.log"), Kind::LevelDbLog(v), log, true);
        for (i, t) in tables.iter().enumerate() {
            push(
                format!("{dir}/{:06}.ldb", 5 + 2 * i),
                Kind::LevelDbTable(v),
                *t,
                true,
            );
        }
    }

    // The root of the user-data-dir.
    file(&mut p, "Local State", Kind::Json, 32 * KIB);
    file(&mut p, "Last Version", Kind::Literal("120.0.6099.224"), 14);
    file(
        &mut p,
        "Last Browser",
        Kind::Literal("/usr/lib/chromium/chromium"),
        26,
    );
    file(&mut p, "First Run", Kind::Empty, 0);
    file(&mut p, "Variations", Kind::Random, 8 * KIB);
    file(
        &mut p,
        "CertificateRevocation/9000/crl-set",
        Kind::Random,
        96 * KIB,
    );
    file(
        &mut p,
        "CertificateRevocation/9000/manifest.json",
        Kind::Json,
        300,
    );
    file(
        &mut p,
        "Crowd Deny/2024.1.1.1/Preload Data",
        Kind::Words,
        12 * KIB,
    );
    file(
        &mut p,
        "hyphen-data/120.0.6050.0/hyph-en-us.hyb",
        Kind::Random,
        28 * KIB,
    );
    for (name, size) in [
        ("english_wikipedia.txt", 600 * KIB),
        ("female_names.txt", 30 * KIB),
        ("male_names.txt", 12 * KIB),
        ("passwords.txt", 250 * KIB),
        ("surnames.txt", 160 * KIB),
        ("us_tv_and_film.txt", 150 * KIB),
    ] {
        file(&mut p, &format!("ZxcvbnData/3/{name}"), Kind::Words, size);
    }
    p.push(FileSpec {
        path: "SingletonLock".into(),
        kind: Kind::Symlink("bench-host-4242"),
        size: 0,
        archived: false,
    });
    p.push(FileSpec {
        path: "SingletonCookie".into(),
        kind: Kind::Symlink("7316042939541377851"),
        size: 0,
        archived: false,
    });
    excluded(
        &mut p,
        "BrowserMetrics/BrowserMetrics-6601A2B3-1F2E.pma",
        Kind::Random,
        4 * MIB,
    );
    excluded(&mut p, "Crashpad/settings.dat", Kind::Random, 40);
    excluded(&mut p, "Crashpad/metadata", Kind::Empty, 0);
    excluded(
        &mut p,
        "Safe Browsing/UrlSoceng.store.4_13349876543210987",
        Kind::Random,
        48 * KIB,
    );

    // Default/: SQLite databases.
    for (name, table, size) in [
        ("History", Table::History, 24 * MIB),
        ("Favicons", Table::Favicons, 8 * MIB),
        ("Web Data", Table::Generic, 4 * MIB),
        ("Network/Cookies", Table::Cookies, 2 * MIB),
        ("Network Action Predictor", Table::History, 2 * MIB),
        ("Login Data", Table::Generic, 512 * KIB),
        ("Login Data For Account", Table::Generic, 128 * KIB),
        ("Shortcuts", Table::History, 384 * KIB),
        ("Top Sites", Table::History, 128 * KIB),
        ("Affiliation Database", Table::Generic, 256 * KIB),
        ("Account Web Data", Table::Generic, 96 * KIB),
        ("DIPS", Table::Generic, 256 * KIB),
        ("heavy_ad_intervention_opt_out.db", Table::Generic, 16 * KIB),
        ("MediaDeviceSalts", Table::Generic, 16 * KIB),
        ("databases/Databases.db", Table::Generic, 16 * KIB),
        ("WebStorage/QuotaManager", Table::Generic, 64 * KIB),
        ("Network/Reporting and NEL", Table::Generic, 64 * KIB),
        ("Network/Trust Tokens", Table::Generic, 32 * KIB),
        ("SharedStorage", Table::Generic, 32 * KIB),
    ] {
        file(
            &mut p,
            &format!("Default/{name}"),
            Kind::Sqlite(table),
            size,
        );
    }
    for name in [
        "History-journal",
        "Favicons-journal",
        "Web Data-journal",
        "Network/Cookies-journal",
        "Login Data-journal",
        "Top Sites-journal",
        "Shortcuts-journal",
    ] {
        file(&mut p, &format!("Default/{name}"), Kind::Empty, 0);
    }

    // Default/: JSON and binary state.
    file(&mut p, "Default/Preferences", Kind::Json, 128 * KIB);
    file(&mut p, "Default/Secure Preferences", Kind::Json, 32 * KIB);
    file(&mut p, "Default/Bookmarks", Kind::Json, 256 * KIB);
    file(&mut p, "Default/Bookmarks.bak", Kind::Json, 250 * KIB);
    file(
        &mut p,
        "Default/Network/TransportSecurity",
        Kind::Json,
        64 * KIB,
    );
    file(
        &mut p,
        "Default/Network/Network Persistent State",
        Kind::Json,
        32 * KIB,
    );
    file(
        &mut p,
        "Default/Visited Links",
        Kind::VisitedLinks,
        128 * KIB,
    );
    file(
        &mut p,
        "Default/Sessions/Session_13350000000000000",
        Kind::Sessions,
        MIB,
    );
    file(
        &mut p,
        "Default/Sessions/Tabs_13350000000000000",
        Kind::Sessions,
        512 * KIB,
    );
    file(
        &mut p,
        "Default/File System/000/t/Paths/000003.log",
        Kind::LevelDbLog(Values::Structured),
        8 * KIB,
    );
    file(
        &mut p,
        "Default/File System/000/t/00/00000000",
        Kind::Random,
        256 * KIB,
    );
    file(
        &mut p,
        "Default/File System/000/t/00/00000001",
        Kind::Random,
        64 * KIB,
    );
    file(
        &mut p,
        "Default/blob_storage/1c7f3d52-9e0b-4a8e-8f5c-2d6b7a0e9c31",
        Kind::Dir,
        0,
    );
    file(&mut p, "Default/Download Service/Files", Kind::Dir, 0);

    // Default/: LevelDB stores.
    leveldb(
        &mut p,
        "Default/Local Storage/leveldb",
        Values::Utf16,
        4 * MIB,
        &[2 * MIB, 2 * MIB, 1536 * KIB],
    );
    leveldb(
        &mut p,
        "Default/Session Storage",
        Values::Utf16,
        MIB,
        &[MIB],
    );
    leveldb(
        &mut p,
        "Default/Service Worker/Database",
        Values::Structured,
        512 * KIB,
        &[256 * KIB],
    );
    leveldb(
        &mut p,
        "Default/shared_proto_db",
        Values::Structured,
        512 * KIB,
        &[512 * KIB],
    );
    leveldb(
        &mut p,
        "Default/shared_proto_db/metadata",
        Values::Structured,
        8 * KIB,
        &[],
    );
    leveldb(
        &mut p,
        "Default/Site Characteristics Database",
        Values::Structured,
        128 * KIB,
        &[128 * KIB],
    );
    leveldb(
        &mut p,
        "Default/Feature Engagement Tracker/EventDB",
        Values::Structured,
        64 * KIB,
        &[],
    );
    leveldb(
        &mut p,
        "Default/Feature Engagement Tracker/AvailabilityDB",
        Values::Structured,
        4 * KIB,
        &[],
    );
    leveldb(
        &mut p,
        "Default/Extension State",
        Values::Structured,
        32 * KIB,
        &[],
    );
    leveldb(
        &mut p,
        "Default/GCM Store",
        Values::Structured,
        16 * KIB,
        &[],
    );
    leveldb(
        &mut p,
        "Default/Sync Data/LevelDB",
        Values::Structured,
        64 * KIB,
        &[],
    );
    leveldb(
        &mut p,
        "Default/commerce_subscription_db",
        Values::Structured,
        4 * KIB,
        &[],
    );
    leveldb(
        &mut p,
        "Default/Download Service/EntryDB",
        Values::Structured,
        4 * KIB,
        &[],
    );
    leveldb(
        &mut p,
        "Default/Platform Notifications",
        Values::Structured,
        16 * KIB,
        &[],
    );
    leveldb(
        &mut p,
        "Default/File System/Origins",
        Values::Structured,
        4 * KIB,
        &[],
    );
    for (i, (origin, db, blobs, count)) in IDB_ORIGINS.iter().enumerate() {
        let dir = format!("Default/IndexedDB/{origin}.indexeddb.leveldb");
        let tables = [db / 4, db / 4, db / 4];
        leveldb(&mut p, &dir, Values::Structured, db / 4, &tables);
        // Blobs: log-uniform sizes, rescaled to the origin's total.
        let sizes: Vec<f64> = (0..*count)
            .map(|_| (4096f64).ln() + rng.f64() * 6.0)
            .map(f64::exp)
            .collect();
        let sum: f64 = sizes.iter().sum();
        for (j, s) in sizes.iter().enumerate() {
            let size = (*s / sum * *blobs as f64) as u64;
            file(
                &mut p,
                &format!(
                    "Default/IndexedDB/{origin}.indexeddb.blob/{}/{:02x}/{:x}",
                    i + 1,
                    j / 16,
                    j + 1
                ),
                Kind::Random,
                size.max(17 * KIB),
            );
        }
    }
    // Service Worker script cache: JavaScript responses (the packer keeps it; only `Cache`
    // directories are left out).
    file(
        &mut p,
        "Default/Service Worker/ScriptCache/index",
        Kind::Random,
        24,
    );
    file(
        &mut p,
        "Default/Service Worker/ScriptCache/index-dir/the-real-index",
        Kind::Random,
        2 * KIB,
    );
    for i in 0..24 {
        let size = 64 * KIB + rng.below(256) * KIB;
        file(
            &mut p,
            &format!("Default/Service Worker/ScriptCache/{:016x}_0", rng.next()),
            Kind::Script,
            size,
        );
        if i % 3 == 0 {
            file(
                &mut p,
                &format!("Default/Service Worker/ScriptCache/{:016x}_1", rng.next()),
                Kind::Random,
                8 * KIB,
            );
        }
    }

    // Extensions: many small files.
    const LOCALES: [&str; 40] = [
        "am", "ar", "bg", "bn", "ca", "cs", "da", "de", "el", "en", "en_GB", "es", "es_419", "et",
        "fa", "fi", "fil", "fr", "gu", "he", "hi", "hr", "hu", "id", "it", "ja", "kn", "ko", "lt",
        "lv", "ml", "mr", "ms", "nl", "no", "pl", "pt_BR", "pt_PT", "ro", "ru",
    ];
    for (e, id) in EXTENSION_IDS.iter().enumerate() {
        let base = format!(
            "Default/Extensions/{id}/{}.{}.{}_0",
            1 + e,
            rng.below(40),
            rng.below(900)
        );
        file(
            &mut p,
            &format!("{base}/manifest.json"),
            Kind::Json,
            2 * KIB + rng.below(3 * KIB),
        );
        file(
            &mut p,
            &format!("{base}/_metadata/verified_contents.json"),
            Kind::Json,
            12 * KIB,
        );
        for l in LOCALES.iter().take(24 + 4 * e) {
            file(
                &mut p,
                &format!("{base}/_locales/{l}/messages.json"),
                Kind::Json,
                2 * KIB + rng.below(6 * KIB),
            );
        }
        for j in 0..(16 + 4 * e) {
            let size = 8 * KIB + rng.below(120 * KIB);
            file(
                &mut p,
                &format!("{base}/js/chunk-{j:02}.js"),
                Kind::Script,
                size,
            );
        }
        for (j, px) in [16, 19, 32, 38, 48, 64, 96, 128, 256, 512]
            .iter()
            .enumerate()
        {
            let size = (*px as u64 * *px as u64 / 2).clamp(600, 90 * KIB) + rng.below(2 * KIB);
            file(
                &mut p,
                &format!("{base}/images/icon{px}-{j}.png"),
                Kind::Png,
                size,
            );
        }
        file(&mut p, &format!("{base}/popup.html"), Kind::Script, 3 * KIB);
        file(
            &mut p,
            &format!("{base}/css/popup.css"),
            Kind::Script,
            9 * KIB,
        );
        leveldb(
            &mut p,
            &format!("Default/Local Extension Settings/{id}"),
            Values::Structured,
            24 * KIB,
            &[],
        );
        file(
            &mut p,
            &format!("Default/Storage/ext/{id}/def/Network Persistent State"),
            Kind::Json,
            2 * KIB,
        );
    }

    // Caches and metrics: written (real profiles have them), left out by the packer.
    excluded(
        &mut p,
        "Default/Cache/Cache_Data/index",
        Kind::Random,
        256 * KIB,
    );
    for i in 0..4 {
        excluded(
            &mut p,
            &format!("Default/Cache/Cache_Data/data_{i}"),
            Kind::Random,
            512 * KIB,
        );
    }
    for i in 0..16 {
        excluded(
            &mut p,
            &format!("Default/Cache/Cache_Data/f_{:06x}", i + 1),
            Kind::Random,
            96 * KIB,
        );
    }
    for i in 0..12 {
        excluded(
            &mut p,
            &format!("Default/Code Cache/js/{:016x}_0", rng.next()),
            Kind::Random,
            128 * KIB + i * KIB,
        );
    }
    excluded(&mut p, "Default/Code Cache/js/index", Kind::Random, 24);
    excluded(&mut p, "Default/GPUCache/data_1", Kind::Random, 256 * KIB);
    excluded(&mut p, "Default/GPUCache/index", Kind::Random, 256 * KIB);
    p
}

// ---------------------------------------------------------------------------------------------
// Content.

fn content(kind: &Kind, size: usize, rng: &mut Rng) -> Vec<u8> {
    let mut out = Vec::with_capacity(size + 4096);
    match kind {
        Kind::Dir | Kind::Symlink(_) | Kind::Empty => return Vec::new(),
        Kind::Literal(s) => return s.as_bytes().to_vec(),
        Kind::Sqlite(t) => sqlite(&mut out, *t, size, rng),
        Kind::LevelDbLog(v) => leveldb_log(&mut out, *v, size, rng),
        Kind::LevelDbTable(v) => leveldb_table(&mut out, *v, size, rng),
        Kind::LevelDbCurrent => out.extend_from_slice(b"MANIFEST-000001\n"),
        Kind::LevelDbLogText => {
            while out.len() < size {
                let t = 13_350_000_000u64 + rng.below(10_000_000);
                let msg = match rng.below(4) {
                    0 => "Recovering log #3".to_owned(),
                    1 => format!("Level-0 table #{}: started", rng.below(20)),
                    2 => format!(
                        "Level-0 table #{}: {} bytes OK",
                        rng.below(20),
                        rng.below(3_000_000)
                    ),
                    _ => "Delete type=3 #1".to_owned(),
                };
                out.extend_from_slice(
                    format!(
                        "2024/03/{:02}-{:02}:{:02}:{:02}.{:06} {:x} {msg}\n",
                        1 + t % 28,
                        t % 24,
                        t % 60,
                        (t / 7) % 60,
                        t % 1_000_000,
                        0x7f00_0000_0000u64 + rng.below(1 << 20)
                    )
                    .as_bytes(),
                );
            }
        }
        Kind::LevelDbManifest => {
            out.extend_from_slice(&[0x56, 0x1a, 0x9e, 0x4c, 0x1c, 0x00, 0x01]);
            out.extend_from_slice(b"\x01\x1aleveldb.BytewiseComparator");
            while out.len() < size {
                out.extend_from_slice(&rng.next().to_le_bytes());
            }
        }
        Kind::Random => random_fill(&mut out, size, rng),
        Kind::Png => {
            out.extend_from_slice(b"\x89PNG\r\n\x1a\n\x00\x00\x00\x0dIHDR");
            random_fill(&mut out, size, rng);
        }
        Kind::Json => json(&mut out, size, rng),
        Kind::Script => script(&mut out, size, rng),
        Kind::Words => {
            while out.len() < size {
                out.extend_from_slice(word(rng).as_bytes());
                out.push(b'\n');
            }
        }
        Kind::Sessions => {
            // SNSS commands: a tag, a pickled payload of URLs, titles (UTF-16) and ints.
            out.extend_from_slice(b"SNSS\x03\x00\x00\x00");
            while out.len() < size {
                let u = url(rng);
                out.extend_from_slice(&((u.len() + 24) as u16).to_le_bytes());
                out.push(rng.below(30) as u8);
                out.extend_from_slice(&(rng.below(500) as u32).to_le_bytes());
                out.extend_from_slice(u.as_bytes());
                for w in 0..3 {
                    let _ = w;
                    for c in word(rng).bytes() {
                        out.extend_from_slice(&[c, 0]);
                    }
                }
                out.extend_from_slice(
                    &(13_350_000_000_000_000u64 + rng.below(1 << 36)).to_le_bytes(),
                );
            }
        }
        Kind::VisitedLinks => {
            // A hash table of 64-bit fingerprints, mostly empty slots.
            out.extend_from_slice(b"VLnk\x03\x00\x00\x00");
            while out.len() < size {
                if rng.below(5) == 0 {
                    out.extend_from_slice(&rng.next().to_le_bytes());
                } else {
                    out.extend_from_slice(&[0; 8]);
                }
            }
        }
    }
    out.truncate(size);
    out.resize(size, 0);
    out
}

/// SQLite-like: a 100-byte header and schema on page 1, then 4 KiB table b-tree leaf pages
/// (page header, cell pointer array, free gap, cells packed at the end) and some free pages.
fn sqlite(out: &mut Vec<u8>, table: Table, size: usize, rng: &mut Rng) {
    const PAGE: usize = 4096;
    let pages = size.div_ceil(PAGE).max(1);
    out.extend_from_slice(b"SQLite format 3\0");
    out.extend_from_slice(&(PAGE as u16).to_be_bytes());
    out.extend_from_slice(&[1, 1, 0, 64, 32, 32]);
    out.extend_from_slice(&(rng.below(10_000) as u32).to_be_bytes());
    out.extend_from_slice(&(pages as u32).to_be_bytes());
    out.resize(100, 0);
    let schema: &[u8] = match table {
        Table::History => b"CREATE TABLE urls(id INTEGER PRIMARY KEY AUTOINCREMENT,url LONGVARCHAR,title LONGVARCHAR,visit_count INTEGER DEFAULT 0 NOT NULL,typed_count INTEGER DEFAULT 0 NOT NULL,last_visit_time INTEGER NOT NULL,hidden INTEGER DEFAULT 0 NOT NULL)CREATE TABLE visits(id INTEGER PRIMARY KEY AUTOINCREMENT,url INTEGER NOT NULL,visit_time INTEGER NOT NULL,from_visit INTEGER,transition INTEGER DEFAULT 0 NOT NULL,segment_id INTEGER,visit_duration INTEGER DEFAULT 0 NOT NULL)",
        Table::Favicons => b"CREATE TABLE favicon_bitmaps(id INTEGER PRIMARY KEY,icon_id INTEGER NOT NULL,last_updated INTEGER DEFAULT 0,image_data BLOB,width INTEGER DEFAULT 0,height INTEGER DEFAULT 0,last_requested INTEGER NOT NULL DEFAULT 0)CREATE TABLE icon_mapping(id INTEGER PRIMARY KEY,page_url LONGVARCHAR NOT NULL,icon_id INTEGER)",
        Table::Cookies => b"CREATE TABLE cookies(creation_utc INTEGER NOT NULL,host_key TEXT NOT NULL,top_frame_site_key TEXT NOT NULL,name TEXT NOT NULL,value TEXT NOT NULL,encrypted_value BLOB NOT NULL,path TEXT NOT NULL,expires_utc INTEGER NOT NULL,is_secure INTEGER NOT NULL,is_httponly INTEGER NOT NULL,last_access_utc INTEGER NOT NULL,has_expires INTEGER NOT NULL,is_persistent INTEGER NOT NULL,priority INTEGER NOT NULL,samesite INTEGER NOT NULL,source_scheme INTEGER NOT NULL,source_port INTEGER NOT NULL,last_update_utc INTEGER NOT NULL)",
        Table::Generic => b"CREATE TABLE autofill(name VARCHAR,value VARCHAR,value_lower VARCHAR,date_created INTEGER DEFAULT 0,date_last_used INTEGER DEFAULT 0,count INTEGER DEFAULT 1,PRIMARY KEY(name,value))CREATE TABLE keywords(id INTEGER PRIMARY KEY,short_name VARCHAR NOT NULL,keyword VARCHAR NOT NULL,favicon_url VARCHAR NOT NULL,url VARCHAR NOT NULL)",
    };
    out.extend_from_slice(schema);
    out.resize(PAGE, 0);
    let mut rowid = 1 + rng.below(1000);
    let mut time = 13_340_000_000_000_000u64 + rng.below(1 << 40);
    let mut cells: Vec<Vec<u8>> = Vec::new();
    let pool = Pages::new(rng, 500);
    for _ in 1..pages {
        if rng.below(20) == 0 {
            // A free page: a trunk pointer and zeros (or stale bytes of a deleted page).
            out.extend_from_slice(&(rng.below(pages as u64) as u32).to_be_bytes());
            let fill = out.len() + PAGE - 4;
            out.resize(fill, 0);
            continue;
        }
        cells.clear();
        let mut used = 8;
        // Pages are rarely full: 60-95 % used, the rest zeros.
        let fill = PAGE * (60 + rng.below(36) as usize) / 100;
        loop {
            let cell = sqlite_row(table, rowid, &mut time, &pool, rng);
            if used + cell.len() + 2 > fill {
                break;
            }
            used += cell.len() + 2;
            cells.push(cell);
            rowid += 1 + rng.below(3);
        }
        let start = out.len();
        out.resize(start + PAGE, 0);
        let page = &mut out[start..];
        page[0] = 0x0D;
        page[3..5].copy_from_slice(&(cells.len() as u16).to_be_bytes());
        let mut end = PAGE;
        for (i, c) in cells.iter().enumerate() {
            end -= c.len();
            page[end..end + c.len()].copy_from_slice(c);
            page[8 + 2 * i..10 + 2 * i].copy_from_slice(&(end as u16).to_be_bytes());
        }
        page[5..7].copy_from_slice(&(end as u16).to_be_bytes());
    }
}

fn sqlite_row(table: Table, rowid: u64, time: &mut u64, pool: &Pages, rng: &mut Rng) -> Vec<u8> {
    *time += rng.below(90_000_000);
    let mut rec = Vec::with_capacity(256);
    match table {
        Table::History => {
            if rng.below(3) != 0 {
                let (u, t) = pool.pick(rng);
                rec.extend_from_slice(&[
                    7,
                    0,
                    (u.len() * 2 + 13).min(255) as u8,
                    (t.len() * 2 + 13).min(255) as u8,
                    1,
                    1,
                    6,
                    8,
                ]);
                rec.extend_from_slice(u.as_bytes());
                rec.extend_from_slice(t.as_bytes());
                rec.push(rng.below(40) as u8);
                rec.push(rng.below(3) as u8);
                rec.extend_from_slice(&time.to_be_bytes());
            } else {
                rec.extend_from_slice(&[7, 0, 4, 6, 4, 1, 4, 4]);
                rec.extend_from_slice(&(rng.below(20_000) as u32).to_be_bytes());
                rec.extend_from_slice(&time.to_be_bytes());
                rec.extend_from_slice(&(rowid.saturating_sub(rng.below(5))).to_be_bytes()[4..]);
                rec.push([0, 1, 7, 8][rng.below(4) as usize]);
                rec.extend_from_slice(&(rng.below(300) as u32).to_be_bytes());
                rec.extend_from_slice(&(rng.below(1 << 26) as u32).to_be_bytes());
            }
        }
        Table::Favicons => {
            if rng.below(3) == 0 {
                let n = 300 + rng.below(1800) as usize;
                rec.extend_from_slice(&[7, 1, 6, 0, 1, 1, 6]);
                rec.extend_from_slice(&(rng.below(5000) as u16).to_be_bytes());
                rec.extend_from_slice(&time.to_be_bytes());
                rec.extend_from_slice(b"\x89PNG\r\n\x1a\n");
                let target = rec.len() + n;
                random_fill(&mut rec, target, rng);
                rec.push(16 << rng.below(3));
                rec.push(16 << rng.below(3));
                rec.extend_from_slice(&time.to_be_bytes());
            } else {
                let (u, _) = pool.pick(rng);
                rec.extend_from_slice(&[3, 1, (u.len() * 2 + 13).min(255) as u8, 2]);
                rec.extend_from_slice(u.as_bytes());
                rec.extend_from_slice(&(rng.below(5000) as u16).to_be_bytes());
            }
        }
        Table::Cookies => {
            let host = domain(rng);
            let name = COOKIE_NAMES[rng.below(COOKIE_NAMES.len() as u64) as usize];
            rec.extend_from_slice(&[18, 6]);
            rec.extend_from_slice(&time.to_be_bytes());
            rec.push(b'.');
            rec.extend_from_slice(host.as_bytes());
            rec.extend_from_slice(b"https://");
            rec.extend_from_slice(host.as_bytes());
            rec.extend_from_slice(name.as_bytes());
            rec.extend_from_slice(b"v10");
            let n = 40 + rng.below(40) as usize;
            let target = rec.len() + n;
            random_fill(&mut rec, target, rng);
            rec.push(b'/');
            rec.extend_from_slice(&(*time + 34_000_000_000_000).to_be_bytes());
            rec.extend_from_slice(&[1, rng.below(2) as u8]);
            rec.extend_from_slice(&time.to_be_bytes());
            rec.extend_from_slice(&[1, 1, 1, rng.below(3) as u8, 2]);
            rec.extend_from_slice(&443u16.to_be_bytes());
            rec.extend_from_slice(&time.to_be_bytes());
        }
        Table::Generic => {
            let k = word(rng);
            let (u, t) = pool.pick(rng);
            let v = if rng.below(2) == 0 { u } else { t };
            rec.extend_from_slice(&[
                6,
                (k.len() * 2 + 13) as u8,
                (v.len() * 2 + 13).min(255) as u8,
                6,
                6,
                1,
            ]);
            rec.extend_from_slice(k.as_bytes());
            rec.extend_from_slice(v.as_bytes());
            rec.extend_from_slice(&time.to_be_bytes());
            rec.extend_from_slice(&(*time + rng.below(1 << 30)).to_be_bytes());
            rec.push(1 + rng.below(20) as u8);
        }
    }
    let mut cell = Vec::with_capacity(rec.len() + 12);
    varint(&mut cell, rec.len() as u64);
    varint(&mut cell, rowid);
    cell.extend_from_slice(&rec);
    cell
}

/// LevelDB write-ahead log: 32 KiB blocks of records (crc32, length, type) holding write
/// batches (sequence, count, then tagged key/value pairs).
fn leveldb_log(out: &mut Vec<u8>, v: Values, size: usize, rng: &mut Rng) {
    let pool = Pages::new(rng, 300);
    const BLOCK: usize = 32 * 1024;
    let mut seq = 1 + rng.below(1000);
    let mut batch = Vec::with_capacity(8192);
    while out.len() < size {
        batch.clear();
        batch.extend_from_slice(&seq.to_le_bytes());
        let n = 1 + rng.below(6) as u32;
        batch.extend_from_slice(&n.to_le_bytes());
        for _ in 0..n {
            batch.push(1);
            let (k, val) = leveldb_kv(v, &pool, rng);
            varint(&mut batch, k.len() as u64);
            batch.extend_from_slice(&k);
            varint(&mut batch, val.len() as u64);
            batch.extend_from_slice(&val);
        }
        seq += n as u64;
        // Fragment across blocks like the real writer.
        let mut rest = &batch[..];
        let mut first = true;
        while !rest.is_empty() {
            let left = BLOCK - out.len() % BLOCK;
            if left < 7 {
                out.resize(out.len() + left, 0);
                continue;
            }
            let take = rest.len().min(left - 7);
            let last = take == rest.len();
            let kind = match (first, last) {
                (true, true) => 1,
                (true, false) => 2,
                (false, false) => 3,
                (false, true) => 4,
            };
            out.extend_from_slice(&(rng.next() as u32).to_le_bytes());
            out.extend_from_slice(&(take as u16).to_le_bytes());
            out.push(kind);
            out.extend_from_slice(&rest[..take]);
            rest = &rest[take..];
            first = false;
        }
    }
}

/// LevelDB table: ~4 KiB data blocks of prefix-compressed keys with restart points, each with
/// a 5-byte trailer (compression type, crc32); then index, meta-index and footer.
fn leveldb_table(out: &mut Vec<u8>, v: Values, size: usize, rng: &mut Rng) {
    let pool = Pages::new(rng, 300);
    let mut restarts: Vec<u32> = Vec::new();
    let mut prev: Vec<u8> = Vec::new();
    let mut block_start = out.len();
    while out.len() + 256 < size {
        let (k, val) = leveldb_kv(v, &pool, rng);
        let shared = if restarts.is_empty() || (out.len() - block_start).is_multiple_of(16) {
            restarts.push((out.len() - block_start) as u32);
            0
        } else {
            prev.iter().zip(&k).take_while(|(a, b)| a == b).count()
        };
        varint(out, shared as u64);
        varint(out, (k.len() - shared) as u64);
        varint(out, val.len() as u64);
        out.extend_from_slice(&k[shared..]);
        out.extend_from_slice(&val);
        prev = k;
        if out.len() - block_start >= 4096 {
            for r in &restarts {
                out.extend_from_slice(&r.to_le_bytes());
            }
            out.extend_from_slice(&(restarts.len() as u32).to_le_bytes());
            out.push(0);
            out.extend_from_slice(&(rng.next() as u32).to_le_bytes());
            restarts.clear();
            block_start = out.len();
        }
    }
    // Index block (last key of each block, handle), then the footer magic.
    while out.len() + 48 < size {
        out.extend_from_slice(&prev);
        varint(out, rng.below(size as u64));
        varint(out, 4096 + rng.below(200));
    }
    out.resize(size.saturating_sub(8), 0);
    out.extend_from_slice(&0xdb47_7524_8b80_fb57u64.to_le_bytes());
}

fn leveldb_kv(v: Values, pool: &Pages, rng: &mut Rng) -> (Vec<u8>, Vec<u8>) {
    let mut k = Vec::with_capacity(64);
    let mut val = Vec::with_capacity(512);
    match v {
        Values::Utf16 => {
            k.extend_from_slice(b"_https://");
            k.extend_from_slice(domain(rng).as_bytes());
            k.extend_from_slice(b"\x00\x01");
            k.extend_from_slice(word(rng).as_bytes());
            k.push(b'_');
            k.extend_from_slice(word(rng).as_bytes());
            // A UTF-16 string value: a site's JSON state (sites write the same shapes over
            // and over), stamped with the time.
            val.push(0);
            let s = format!(
                "{{\"t\":{},\"v\":{}}}",
                1_700_000_000_000u64 + rng.below(1 << 32),
                pool.state(rng)
            );
            for b in s.bytes() {
                val.extend_from_slice(&[b, 0]);
            }
        }
        Values::Structured => {
            k.extend_from_slice(&[0, 0, 0, 0, 1, 1]);
            k.extend_from_slice(&(rng.below(4) as u16).to_be_bytes());
            k.extend_from_slice(&(rng.below(1 << 20) as u32).to_be_bytes());
            // A structured-clone record: version tag, then fields; a third of the values
            // are already compressed (snappy-wrapped) and look random.
            val.extend_from_slice(&[0xff, 0x0f, b'o']);
            if rng.below(3) == 0 {
                let n = 64 + rng.below(900) as usize;
                random_fill(&mut val, n, rng);
            } else {
                for _ in 0..(3 + rng.below(10)) {
                    let w = word(rng);
                    val.push(b'"');
                    val.push(w.len() as u8);
                    val.extend_from_slice(w.as_bytes());
                    match rng.below(3) {
                        0 => {
                            val.push(b'N');
                            val.extend_from_slice(&(rng.below(1 << 20) as f64).to_le_bytes());
                        }
                        1 => {
                            let (_, t) = pool.pick(rng);
                            val.push(b'"');
                            val.push(t.len().min(255) as u8);
                            val.extend_from_slice(t.as_bytes());
                        }
                        _ => {
                            let (u, _) = pool.pick(rng);
                            val.push(b'"');
                            val.push(u.len().min(255) as u8);
                            val.extend_from_slice(u.as_bytes());
                        }
                    }
                }
                val.push(b'{');
            }
        }
    }
    (k, val)
}

fn json(out: &mut Vec<u8>, size: usize, rng: &mut Rng) {
    out.extend_from_slice(b"{\n");
    let mut depth = 1;
    while out.len() + 64 < size {
        let indent = "   ".repeat(depth);
        out.extend_from_slice(indent.as_bytes());
        out.push(b'"');
        out.extend_from_slice(word(rng).as_bytes());
        out.push(b'_');
        out.extend_from_slice(word(rng).as_bytes());
        out.extend_from_slice(b"\": ");
        match rng.below(8) {
            0 if depth < 5 => {
                out.extend_from_slice(b"{\n");
                depth += 1;
                continue;
            }
            1 => out.extend_from_slice(format!("\"{}\"", url(rng)).as_bytes()),
            2 => out.extend_from_slice(format!("\"{}\"", title(rng)).as_bytes()),
            3 => out.extend_from_slice(format!("\"{:x}{:x}\"", rng.next(), rng.next()).as_bytes()),
            4 => out.extend_from_slice(if rng.below(2) == 0 { b"true" } else { b"false" }),
            _ => out.extend_from_slice(
                format!("\"{}\"", 13_350_000_000_000_000u64 + rng.below(1 << 40)).as_bytes(),
            ),
        }
        if depth > 1 && rng.below(6) == 0 {
            out.extend_from_slice(b"\n");
            depth -= 1;
            out.extend_from_slice("   ".repeat(depth).as_bytes());
            out.extend_from_slice(b"},\n");
        } else {
            out.extend_from_slice(b",\n");
        }
    }
    while out.len() < size {
        out.push(b' ');
    }
}

fn script(out: &mut Vec<u8>, size: usize, rng: &mut Rng) {
    const KW: [&str; 12] = [
        "function",
        "return",
        "const",
        "let",
        "this",
        "await",
        "if",
        "else",
        "new",
        "typeof",
        "undefined",
        "null",
    ];
    while out.len() < size {
        let a = word(rng);
        let b = word(rng);
        match rng.below(5) {
            0 => out.extend_from_slice(format!("{} {a}_{b}(e,t,n){{", KW[0]).as_bytes()),
            1 => out.extend_from_slice(
                format!(
                    "{} {a}=t.{b}({},\"{}\");",
                    KW[2 + rng.below(2) as usize],
                    rng.below(1000),
                    word(rng)
                )
                .as_bytes(),
            ),
            2 => out.extend_from_slice(
                format!(
                    "{}(e.{a}==={}){{n.{b}()}}",
                    KW[6],
                    KW[10 + rng.below(2) as usize]
                )
                .as_bytes(),
            ),
            3 => out.extend_from_slice(format!("\"{}\":\"{}\",", a, title(rng)).as_bytes()),
            _ => out.extend_from_slice(format!("{} {}.{a}_{b};}}", KW[1], KW[4]).as_bytes()),
        }
        if rng.below(3) == 0 {
            out.push(b'\n');
        }
    }
}

fn random_fill(out: &mut Vec<u8>, target: usize, rng: &mut Rng) {
    while out.len() + 8 <= target {
        out.extend_from_slice(&rng.next().to_le_bytes());
    }
    while out.len() < target {
        out.push(rng.next() as u8);
    }
}

fn varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

// ---------------------------------------------------------------------------------------------
// Vocabulary.

const WORDS: [&str; 95] = [
    "account",
    "settings",
    "search",
    "results",
    "news",
    "weather",
    "video",
    "watch",
    "music",
    "playlist",
    "docs",
    "sheet",
    "project",
    "report",
    "quarterly",
    "review",
    "meeting",
    "calendar",
    "invite",
    "inbox",
    "message",
    "thread",
    "reply",
    "draft",
    "shopping",
    "cart",
    "checkout",
    "order",
    "delivery",
    "tracking",
    "product",
    "price",
    "compare",
    "rating",
    "travel",
    "flight",
    "hotel",
    "booking",
    "map",
    "directions",
    "restaurant",
    "menu",
    "recipe",
    "dinner",
    "health",
    "fitness",
    "running",
    "sport",
    "football",
    "score",
    "league",
    "finance",
    "stock",
    "market",
    "bank",
    "login",
    "profile",
    "photo",
    "album",
    "upload",
    "share",
    "friend",
    "group",
    "event",
    "ticket",
    "concert",
    "movie",
    "trailer",
    "series",
    "episode",
    "season",
    "learn",
    "course",
    "lesson",
    "tutorial",
    "guide",
    "developer",
    "api",
    "reference",
    "release",
    "notes",
    "issue",
    "pull",
    "request",
    "commit",
    "branch",
    "build",
    "deploy",
    "cloud",
    "storage",
    "console",
    "dashboard",
    "metrics",
    "alert",
    "support",
];

const DOMAINS: [&str; 32] = [
    "google.com",
    "youtube.com",
    "mail.example.com",
    "docs.example.org",
    "github.com",
    "stackoverflow.com",
    "wikipedia.org",
    "amazon.com",
    "ebay.com",
    "reddit.com",
    "news.ycombinator.com",
    "nytimes.com",
    "bbc.co.uk",
    "theguardian.com",
    "linkedin.com",
    "twitter.com",
    "facebook.com",
    "instagram.com",
    "netflix.com",
    "spotify.com",
    "booking.com",
    "airbnb.com",
    "maps.example.com",
    "app.example.net",
    "www.example.io",
    "developer.mozilla.org",
    "docs.rs",
    "crates.io",
    "aws.amazon.com",
    "console.cloud.example",
    "weather.com",
    "espn.com",
];

const COOKIE_NAMES: [&str; 16] = [
    "_ga",
    "_gid",
    "SID",
    "HSID",
    "SSID",
    "APISID",
    "SAPISID",
    "NID",
    "__Secure-3PSID",
    "session",
    "csrftoken",
    "_fbp",
    "OptanonConsent",
    "__cf_bm",
    "AEC",
    "1P_JAR",
];

fn word(rng: &mut Rng) -> &'static str {
    WORDS[rng.below(WORDS.len() as u64) as usize]
}

fn domain(rng: &mut Rng) -> &'static str {
    DOMAINS[rng.below(DOMAINS.len() as u64) as usize]
}

fn url(rng: &mut Rng) -> String {
    let mut u = String::with_capacity(120);
    u.push_str("https://");
    u.push_str(domain(rng));
    for _ in 0..(1 + rng.below(4)) {
        u.push('/');
        u.push_str(word(rng));
    }
    match rng.below(4) {
        0 => u.push_str(&format!("?q={}+{}", word(rng), word(rng))),
        1 => u.push_str(&format!("?id={:x}", rng.next() >> 24)),
        _ => {}
    }
    u
}

fn title(rng: &mut Rng) -> String {
    let mut t = String::with_capacity(60);
    for i in 0..(2 + rng.below(6)) {
        if i > 0 {
            t.push(' ');
        }
        let w = word(rng);
        if i == 0 {
            t.push_str(&w[..1].to_uppercase());
            t.push_str(&w[1..]);
        } else {
            t.push_str(w);
        }
    }
    t.push_str(" - ");
    t.push_str(domain(rng));
    t
}

/// The pages and site states one profile keeps coming back to: rows pick from them with a
/// strong skew towards the first ones, as browsing does.
struct Pages {
    urls: Vec<String>,
    titles: Vec<String>,
    states: Vec<String>,
}

impl Pages {
    fn new(rng: &mut Rng, n: usize) -> Self {
        let urls = (0..n).map(|_| url(rng)).collect();
        let titles = (0..n).map(|_| title(rng)).collect();
        let states = (0..n / 8).map(|_| state_json(rng)).collect();
        Self {
            urls,
            titles,
            states,
        }
    }

    fn skewed(rng: &mut Rng, n: usize) -> usize {
        let u = rng.f64();
        ((u * u * u) * n as f64) as usize
    }

    fn pick(&self, rng: &mut Rng) -> (&str, &str) {
        let i = Self::skewed(rng, self.urls.len());
        (&self.urls[i], &self.titles[i])
    }

    fn state(&self, rng: &mut Rng) -> &str {
        &self.states[Self::skewed(rng, self.states.len())]
    }
}

/// A site's stored JSON state: settings, ids, tokens, titles.
fn state_json(rng: &mut Rng) -> String {
    let mut s = String::with_capacity(256);
    s.push('{');
    for i in 0..(2 + rng.below(12)) {
        if i > 0 {
            s.push(',');
        }
        s.push('"');
        s.push_str(word(rng));
        s.push_str("\":");
        match rng.below(4) {
            0 => s.push_str(&format!("{}", 1_700_000_000_000u64 + rng.below(1 << 32))),
            1 => s.push_str(&format!("\"{:016x}{:08x}\"", rng.next(), rng.next() as u32)),
            2 => s.push_str(&format!("\"{}\"", title(rng))),
            _ => s.push_str(if rng.below(2) == 0 { "true" } else { "null" }),
        }
    }
    s.push('}');
    s
}

/// SplitMix64: small, fast, deterministic.
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Self {
        Self(seed)
    }

    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (n > 0), slightly biased, which does not matter here.
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        ((self.next() >> 32) * n) >> 32
    }

    pub(crate) fn f64(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}
