//! The profile archive on the task's start and end path, with the generated ~100 MiB Chrome
//! profile (`benches/support/profile_gen.rs`, seed 42):
//!
//! - `pack_gz/sink`: tar + gzip of the profile into `io::sink()` (the packer alone);
//! - `persist/directory`: `profile::persist_profile` into a `DirectoryArchives` store (packer
//!   thread, chunk channel, async file write, fsync, rename);
//! - `unpack_gz/memory`: gunzip + untar of the archive held in memory into a fresh directory
//!   (the unpacker alone, with every safety check);
//! - `hydrate/directory`: `profile::hydrate` from the `DirectoryArchives` store into a fresh
//!   directory.
//!
//! Throughput is profile data: the uncompressed bytes of the archived files. The profile and
//! the archive are made once, outside the timed loop, in a temporary directory. Each unpack goes
//! to a fresh directory on tmpfs (`/dev/shm`, or `PROFILE_BENCH_SCRATCH`), removed outside the
//! timed loop: on the bench VM's ext4 (no journal), creating hundreds of files right after
//! deleting as many makes every create scan the recently freed inodes, which would measure
//! that rather than the unpacker. Everything stays in the page cache (the profile is what
//! Chrome just wrote), so these are CPU figures; `persist/directory` includes one fsync of the
//! archive. About a minute; `scripts/bench/profile.sh` measures the same end to end on disk
//! and against S3.
// Test code is not held to the shape limits of clippy.toml: a test reads top to bottom.
#![allow(clippy::too_many_lines, clippy::too_many_arguments)]

#[path = "support/profile_gen.rs"]
mod profile_gen;

use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use criterion::{BatchSize, Criterion, SamplingMode, Throughput, criterion_group, criterion_main};
use wallcrawler_controller::profile::DirectoryArchives;
use wallcrawler_controller::profile::{self, ArchiveLimits};
use wallcrawler_controller::stores::ArchiveStore;

const KEY: &str = "proj_bench/ctx_bench/profile.tar.gz";
const LIMITS: ArchiveLimits = ArchiveLimits {
    max_bytes: 1 << 31,
    max_entries: 100_000,
};

/// A fresh, empty directory under `root` (the previous one, if any, goes with the returned
/// guard's drop, outside the timed loop).
struct Fresh(PathBuf);

impl Drop for Fresh {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn fresh(root: &Path, n: &mut u64) -> Fresh {
    *n += 1;
    Fresh(root.join(format!("unpacked-{n}")))
}

fn bench_profile(c: &mut Criterion) {
    let tmp = tempfile::tempdir().expect("temp dir");
    let src = tmp.path().join("profile");
    let generated =
        profile_gen::generate(&src, 42, profile_gen::DEFAULT_BYTES).expect("generate profile");
    let (stats, archive) = profile::pack_gz(&src, Vec::new(), &[]).expect("pack");
    assert_eq!(stats.bytes, generated.archived_bytes);
    let store_dir = tmp.path().join("store");
    let store: Arc<dyn ArchiveStore> = Arc::new(DirectoryArchives {
        dir: store_dir.clone(),
    });
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(profile::persist_profile(store.clone(), KEY, &src, vec![]))
        .expect("persist");
    eprintln!(
        "profile: {} bytes in {} files ({} dirs; {} bytes of caches left out), archive {} bytes ({:.2}x)",
        stats.bytes,
        generated.archived_files,
        generated.directories,
        generated.excluded_bytes,
        archive.len(),
        stats.bytes as f64 / archive.len() as f64
    );
    let scratch = match std::env::var_os("PROFILE_BENCH_SCRATCH") {
        Some(p) => PathBuf::from(p),
        None if Path::new("/dev/shm").is_dir() => PathBuf::from("/dev/shm"),
        None => tmp.path().to_owned(),
    };
    let out_dir = tempfile::tempdir_in(&scratch).expect("scratch dir");
    let out = out_dir.path().to_owned();
    let mut n = 0;

    let mut g = c.benchmark_group("profile");
    // Flat: iterations of a quarter second or more, the same number in every sample.
    g.sample_size(10)
        .sampling_mode(SamplingMode::Flat)
        .warm_up_time(Duration::from_secs(2))
        .measurement_time(Duration::from_secs(10))
        .throughput(Throughput::BytesDecimal(stats.bytes));
    g.bench_function("pack_gz/sink", |b| {
        b.iter(|| profile::pack_gz(black_box(&src), std::io::sink(), &[]).expect("pack"))
    });
    g.bench_function("persist/directory", |b| {
        b.iter(|| {
            rt.block_on(profile::persist_profile(store.clone(), KEY, &src, vec![]))
                .expect("persist")
        })
    });
    g.bench_function("unpack_gz/memory", |b| {
        b.iter_batched(
            || fresh(&out, &mut n),
            |dest| {
                let s =
                    profile::unpack_gz(black_box(&archive[..]), &dest.0, LIMITS).expect("unpack");
                assert_eq!(s.bytes, stats.bytes);
                dest
            },
            BatchSize::PerIteration,
        )
    });
    g.bench_function("hydrate/directory", |b| {
        b.iter_batched(
            || fresh(&out, &mut n),
            |dest| {
                let s = rt
                    .block_on(profile::hydrate(
                        store.as_ref(),
                        KEY,
                        &dest.0,
                        LIMITS,
                        Duration::from_secs(5),
                    ))
                    .expect("hydrate")
                    .expect("archive present");
                assert_eq!(s.bytes, stats.bytes);
                dest
            },
            BatchSize::PerIteration,
        )
    });
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default();
    targets = bench_profile
}
criterion_main!(benches);
