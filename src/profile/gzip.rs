//! One gzip member deflated on several CPUs (the pack's writer).

use std::collections::VecDeque;
use std::io::{self, Write};
use std::sync::{Mutex, mpsc};

use flate2::{Compress, Compression, Crc, FlushCompress};

use super::*;

/// Deflate workers per pack, at most.
pub(super) const MAX_GZ_WORKERS: usize = 4;
/// Input deflated per job.
pub(super) const GZ_CHUNK: usize = 1 << 20;
/// Deflate's window: each job is primed with this much of the input before it.
pub(super) const GZ_WINDOW: usize = 32 * 1024;

/// One piece of the stream to deflate.
pub(super) struct GzJob {
    dictionary: Vec<u8>,
    data: Vec<u8>,
    reply: mpsc::SyncSender<io::Result<GzDone>>,
}

pub(super) struct GzDone {
    deflated: Vec<u8>,
    crc: Crc,
}

/// Runs jobs until the channel closes.
pub(super) fn gz_worker(jobs: &Mutex<mpsc::Receiver<GzJob>>) {
    let mut c = Compress::new(Compression::fast(), false);
    loop {
        let job = match jobs.lock().unwrap_or_else(|e| e.into_inner()).recv() {
            Ok(job) => job,
            Err(_) => return,
        };
        let done = deflate_piece(&mut c, &job.dictionary, &job.data).map(|deflated| {
            let mut crc = Crc::new();
            crc.update(&job.data);
            GzDone { deflated, crc }
        });
        let _ = job.reply.send(done);
    }
}

/// Raw deflate of `data` after `dictionary`, ending sync-flushed on a byte boundary (not final).
///
/// Blocks that look incompressible (random or already compressed: IndexedDB blobs, images,
/// compressed values) are stored rather than deflated: deflate's fast level would spend about
/// four times as long per byte on them as on text, only to make them bigger.
pub(super) fn deflate_piece(
    c: &mut Compress,
    dictionary: &[u8],
    data: &[u8],
) -> io::Result<Vec<u8>> {
    let mut out = Vec::with_capacity(data.len() + data.len() / 16 + 1024);
    prime(c, dictionary, &[])?;
    let mut storing = false;
    for (i, block) in data.chunks(GZ_BLOCK).enumerate() {
        if looks_incompressible(block) {
            if !storing {
                // End the deflated run on a byte boundary.
                compress_all(c, &[], &mut out, FlushCompress::Sync)?;
                storing = true;
            }
            for part in block.chunks(usize::from(u16::MAX)) {
                let len = part.len() as u16;
                out.push(0); // not final, stored
                out.extend_from_slice(&len.to_le_bytes());
                out.extend_from_slice(&(!len).to_le_bytes());
                out.extend_from_slice(part);
            }
        } else {
            if storing {
                // The compressor did not see the stored bytes: start it again on what the
                // decoder's window holds.
                prime(c, dictionary, &data[..i * GZ_BLOCK])?;
                storing = false;
            }
            compress_all(c, block, &mut out, FlushCompress::None)?;
        }
    }
    if !storing {
        compress_all(c, &[], &mut out, FlushCompress::Sync)?;
    }
    Ok(out)
}

/// Resets the compressor with the last window of `dictionary` followed by `before` as history.
pub(super) fn prime(c: &mut Compress, dictionary: &[u8], before: &[u8]) -> io::Result<()> {
    c.reset();
    let history: std::borrow::Cow<'_, [u8]> = if before.len() >= GZ_WINDOW {
        before[before.len() - GZ_WINDOW..].into()
    } else {
        let from_dictionary = GZ_WINDOW - before.len();
        let mut h = dictionary[dictionary.len().saturating_sub(from_dictionary)..].to_vec();
        h.extend_from_slice(before);
        h.into()
    };
    if !history.is_empty() {
        c.set_dictionary(&history).map_err(io::Error::other)?;
    }
    Ok(())
}

/// Feeds all of `data`; with a flush, also until the flush is complete.
pub(super) fn compress_all(
    c: &mut Compress,
    data: &[u8],
    out: &mut Vec<u8>,
    flush: FlushCompress,
) -> io::Result<()> {
    let start = c.total_in();
    loop {
        let consumed = (c.total_in() - start) as usize;
        if out.capacity() - out.len() < 1024 {
            out.reserve(64 * 1024 + data.len() - consumed);
        }
        c.compress_vec(&data[consumed..], out, flush)
            .map_err(io::Error::other)?;
        let all_in = (c.total_in() - start) as usize == data.len();
        // A flush is complete when it did not run out of room.
        if all_in && (matches!(flush, FlushCompress::None) || out.len() < out.capacity()) {
            return Ok(());
        }
    }
}

/// Unit of the store-or-deflate decision.
pub(super) const GZ_BLOCK: usize = 64 * 1024;

/// Whether `block` looks like it will not shrink: random and compressed data have near-uniform
/// byte frequencies. Three 1 KiB samples (start, middle, end) must all look so. Uniform bytes
/// measure about 7.8 bits per byte on 1 KiB; text and databases 3-6; base64 6.
pub(super) fn looks_incompressible(block: &[u8]) -> bool {
    const SAMPLE: usize = 1024;
    if block.len() < 4 * SAMPLE {
        return false;
    }
    let mid = block.len() / 2 - SAMPLE / 2;
    [0, mid, block.len() - SAMPLE]
        .iter()
        .all(|&at| byte_entropy(&block[at..at + SAMPLE]) > 7.5)
}

/// Shannon entropy of the byte values, bits per byte.
pub(super) fn byte_entropy(sample: &[u8]) -> f64 {
    let mut counts = [0u32; 256];
    for &b in sample {
        counts[b as usize] += 1;
    }
    let n = sample.len() as f64;
    counts
        .iter()
        .filter(|&&k| k > 0)
        .map(|&k| {
            let p = f64::from(k) / n;
            -p * p.log2()
        })
        .sum()
}

/// A gzip writer that deflates [`GZ_CHUNK`] pieces of its input on worker threads and writes
/// them in order as one gzip member, pigz's scheme: every piece is primed with the 32 KiB
/// before it (so the output is about the size one stream would be) and ends sync-flushed on a
/// byte boundary; `finish` adds an empty final block and the trailer (CRC-32, size). At most
/// `max_pending` pieces are in flight, so memory stays bounded whatever the profile's size.
pub(super) struct ParGzWriter<W: Write> {
    out: W,
    buf: Vec<u8>,
    window: Vec<u8>,
    jobs: mpsc::Sender<GzJob>,
    pending: VecDeque<mpsc::Receiver<io::Result<GzDone>>>,
    max_pending: usize,
    crc: Crc,
}

impl<W: Write> ParGzWriter<W> {
    pub(super) fn new(
        mut out: W,
        jobs: mpsc::Sender<GzJob>,
        max_pending: usize,
    ) -> Result<Self, ArchiveError> {
        // ID, deflate, no flags, no mtime, "fastest", Unix.
        out.write_all(&[0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 4, 3])
            .map_err(|source| ArchiveError::Write {
                path: "<archive>".into(),
                source,
            })?;
        Ok(Self {
            out,
            buf: Vec::with_capacity(GZ_CHUNK),
            window: Vec::new(),
            jobs,
            pending: VecDeque::new(),
            max_pending: max_pending.max(1),
            crc: Crc::new(),
        })
    }

    fn dispatch(&mut self) -> io::Result<()> {
        while self.pending.len() >= self.max_pending {
            self.write_oldest()?;
        }
        let data = std::mem::replace(&mut self.buf, Vec::with_capacity(GZ_CHUNK));
        // Only the last piece can be shorter than the window; nothing follows it.
        let tail = data[data.len().saturating_sub(GZ_WINDOW)..].to_vec();
        let dictionary = std::mem::replace(&mut self.window, tail);
        let (reply, done) = mpsc::sync_channel(1);
        self.jobs
            .send(GzJob {
                dictionary,
                data,
                reply,
            })
            .map_err(|_| io::Error::other("the deflate workers stopped"))?;
        self.pending.push_back(done);
        Ok(())
    }

    fn write_oldest(&mut self) -> io::Result<()> {
        let Some(done) = self.pending.pop_front() else {
            return Ok(());
        };
        let done = done
            .recv()
            .map_err(|_| io::Error::other("a deflate worker stopped"))??;
        self.crc.combine(&done.crc);
        self.out.write_all(&done.deflated)
    }

    /// Writes what is left, the final block and the trailer; returns the inner writer.
    pub(super) fn finish(mut self) -> io::Result<W> {
        if !self.buf.is_empty() {
            self.dispatch()?;
        }
        while !self.pending.is_empty() {
            self.write_oldest()?;
        }
        // An empty final block with fixed codes, then CRC-32 and size mod 2^32.
        self.out.write_all(&[0x03, 0x00])?;
        self.out.write_all(&self.crc.sum().to_le_bytes())?;
        self.out.write_all(&self.crc.amount().to_le_bytes())?;
        Ok(self.out)
    }
}

impl<W: Write> Write for ParGzWriter<W> {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        let n = data.len().min(GZ_CHUNK - self.buf.len());
        self.buf.extend_from_slice(&data[..n]);
        if self.buf.len() == GZ_CHUNK {
            self.dispatch()?;
        }
        Ok(n)
    }

    /// Pieces are cut at fixed sizes; flushing only writes out the finished ones.
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}
