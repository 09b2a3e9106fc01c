//! Record batch compression codecs, in the framings Kafka clients put on the
//! wire (attribute bits 0-2 of a batch):
//!
//! | id | codec  | framing                                                    |
//! |----|--------|------------------------------------------------------------|
//! | 1  | gzip   | gzip stream (RFC 1952); concatenated members accepted      |
//! | 2  | snappy | Xerial framing (what the Java and librdkafka producers     |
//! |    |        | write) *or* one raw snappy block (some clients); both read |
//! | 3  | lz4    | LZ4 frame format                                           |
//! | 4  | zstd   | zstd frame(s)                                              |
//!
//! Decompression is the broker's exposure to decompression bombs, so
//! [`decompress`] takes a hard output bound: it stops and fails as soon as
//! output would pass `max_out`, and never allocates an output buffer larger
//! than `max_out + 1` bytes (declared sizes in headers are checked before
//! any allocation). Codec-internal state is bounded separately: lz4 block
//! buffers are at most 4 MiB by format, zstd's window is capped by
//! [`zstd_window_log_max`].

use std::io::{Read, Write};

use crate::corrupt;
use crate::error::{Error, Result};

/// The compression codec of a batch (attribute bits 0-2).
#[repr(u8)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Codec {
    #[default]
    None = 0,
    Gzip = 1,
    Snappy = 2,
    Lz4 = 3,
    Zstd = 4,
}

impl Codec {
    /// Every codec, in id order.
    pub const ALL: [Codec; 5] = [
        Codec::None,
        Codec::Gzip,
        Codec::Snappy,
        Codec::Lz4,
        Codec::Zstd,
    ];

    /// The codec named by a batch's attributes. Ids 5-7 are not assigned by
    /// Kafka; a batch carrying one is corrupt.
    pub fn from_attributes(attributes: i16) -> Result<Codec> {
        Codec::from_id((attributes & 0x07) as u8)
    }

    /// The codec with this numeric id (0-4).
    pub fn from_id(id: u8) -> Result<Codec> {
        Ok(match id {
            0 => Codec::None,
            1 => Codec::Gzip,
            2 => Codec::Snappy,
            3 => Codec::Lz4,
            4 => Codec::Zstd,
            _ => return corrupt!("unknown compression codec id {id}"),
        })
    }

    /// The name used in topic configs (`compression.type`).
    pub fn name(self) -> &'static str {
        match self {
            Codec::None => "none",
            Codec::Gzip => "gzip",
            Codec::Snappy => "snappy",
            Codec::Lz4 => "lz4",
            Codec::Zstd => "zstd",
        }
    }
}

/// The 8-byte magic that opens a Xerial-framed snappy stream.
const XERIAL_MAGIC: [u8; 8] = [0x82, b'S', b'N', b'A', b'P', b'P', b'Y', 0];
/// Magic + version (int32) + compatible version (int32).
const XERIAL_HEADER_LEN: usize = 16;
/// The Xerial writer's default block size (the Java producer's).
const XERIAL_BLOCK: usize = 32 * 1024;

/// Compresses `data` with `codec` at the codec's default level (gzip 6,
/// zstd 3, like the Java producer). `Codec::None` returns a copy.
pub fn compress(codec: Codec, data: &[u8]) -> Result<Vec<u8>> {
    match codec {
        Codec::None => Ok(data.to_vec()),
        Codec::Gzip => {
            let mut enc = flate2::write::GzEncoder::new(
                Vec::with_capacity(data.len() / 2 + 64),
                flate2::Compression::default(),
            );
            enc.write_all(data)?;
            Ok(enc.finish()?)
        }
        Codec::Snappy => {
            let mut out = Vec::with_capacity(data.len() / 2 + 64);
            out.extend_from_slice(&XERIAL_MAGIC);
            out.extend_from_slice(&1i32.to_be_bytes()); // version
            out.extend_from_slice(&1i32.to_be_bytes()); // minimum compatible version
            let mut enc = snap::raw::Encoder::new();
            let mut block = Vec::new();
            for chunk in data.chunks(XERIAL_BLOCK) {
                block.resize(snap::raw::max_compress_len(chunk.len()), 0);
                let n = enc.compress(chunk, &mut block).map_err(snappy_err)?;
                out.extend_from_slice(&(n as i32).to_be_bytes());
                out.extend_from_slice(&block[..n]);
            }
            Ok(out)
        }
        Codec::Lz4 => {
            // Independent 64 KiB blocks, no content size or checksum: the
            // plainest frame, which every Kafka client reads.
            let info = lz4_flex::frame::FrameInfo::new()
                .block_size(lz4_flex::frame::BlockSize::Max64KB)
                .block_mode(lz4_flex::frame::BlockMode::Independent);
            let mut enc = lz4_flex::frame::FrameEncoder::with_frame_info(
                info,
                Vec::with_capacity(data.len() / 2 + 64),
            );
            enc.write_all(data)?;
            enc.finish()
                .map_err(|e| Error::InvalidArgument(format!("lz4: {e}")))
        }
        Codec::Zstd => Ok(zstd::bulk::compress(data, 3)?),
    }
}

/// Decompresses `data`, failing with `CorruptRecord` on malformed input and
/// with `CorruptRecord("decompressed size exceeds ...")` as soon as the output
/// would pass `max_out` bytes.
pub fn decompress(codec: Codec, data: &[u8], max_out: usize) -> Result<Vec<u8>> {
    match codec {
        Codec::None => {
            if data.len() > max_out {
                return too_big(max_out);
            }
            Ok(data.to_vec())
        }
        Codec::Gzip => read_bounded(
            flate2::read::MultiGzDecoder::new(data),
            codec,
            max_out,
            data.len(),
        ),
        Codec::Snappy => decompress_snappy(data, max_out),
        Codec::Lz4 => {
            check_lz4_framing(data)?;
            read_bounded(
                lz4_flex::frame::FrameDecoder::new(data),
                codec,
                max_out,
                data.len(),
            )
        }
        Codec::Zstd => {
            let mut dec =
                zstd::stream::read::Decoder::with_buffer(data).map_err(|e| codec_err(codec, e))?;
            dec.window_log_max(zstd_window_log_max(max_out))
                .map_err(|e| codec_err(codec, e))?;
            read_bounded(dec, codec, max_out, data.len())
        }
    }
}

/// The largest zstd window (log2 bytes) accepted when at most `max_out`
/// bytes may come out. A window never needs to exceed the output, but
/// streaming producers (the Java client) write frames without a content
/// size whose window is set by the level (2 MiB at level 3), so the floor is
/// 8 MiB; the ceiling is zstd's own default limit (128 MiB).
pub fn zstd_window_log_max(max_out: usize) -> u32 {
    let need = usize::BITS - max_out.saturating_sub(1).leading_zeros();
    need.clamp(23, 27)
}

fn too_big<T>(max_out: usize) -> Result<T> {
    corrupt!("decompressed size exceeds {max_out} bytes")
}

fn codec_err(codec: Codec, e: impl std::fmt::Display) -> Error {
    Error::CorruptRecord(format!("{} decompression failed: {e}", codec.name()))
}

fn snappy_err(e: snap::Error) -> Error {
    Error::CorruptRecord(format!("snappy: {e}"))
}

/// Reads `r` to the end into a buffer that never grows past `max_out + 1`
/// bytes; reaching that extra byte means the bound was passed.
fn read_bounded<R: Read>(
    mut r: R,
    codec: Codec,
    max_out: usize,
    input_len: usize,
) -> Result<Vec<u8>> {
    let limit = max_out.saturating_add(1);
    // Batches usually compress 2-5x; start there and double.
    let mut cap = input_len.saturating_mul(4).clamp(4096, 1 << 20).min(limit);
    let mut out = vec![0u8; cap];
    let mut filled = 0;
    loop {
        if filled == cap {
            if cap >= limit {
                return too_big(max_out);
            }
            cap = cap.saturating_mul(2).min(limit);
            out.resize(cap, 0);
        }
        match r.read(&mut out[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(codec_err(codec, e)),
        }
    }
    if filled > max_out {
        return too_big(max_out);
    }
    out.truncate(filled);
    Ok(out)
}

/// Walks the frame and block structure of LZ4 frame data without
/// decompressing. The decoder we use treats end of input where a block
/// header is expected as a clean end, which would let a cut-off payload
/// pass; this insists on complete frames, each closed by its end mark.
fn check_lz4_framing(data: &[u8]) -> Result<()> {
    const MAGIC: u32 = 0x184D_2204;
    const SKIPPABLE_MASK: u32 = 0xFFFF_FFF0;
    const SKIPPABLE: u32 = 0x184D_2A50;
    fn take<'a>(rest: &mut &'a [u8], n: usize) -> Result<&'a [u8]> {
        if rest.len() < n {
            return corrupt!("lz4: truncated frame");
        }
        let (head, tail) = rest.split_at(n);
        *rest = tail;
        Ok(head)
    }
    fn le32(b: &[u8]) -> u32 {
        u32::from_le_bytes([b[0], b[1], b[2], b[3]])
    }
    if data.is_empty() {
        return corrupt!("lz4: empty input");
    }
    let mut rest = data;
    while !rest.is_empty() {
        let magic = le32(take(&mut rest, 4)?);
        if magic & SKIPPABLE_MASK == SKIPPABLE {
            let n = le32(take(&mut rest, 4)?) as usize;
            take(&mut rest, n)?;
            continue;
        }
        if magic != MAGIC {
            return corrupt!("lz4: bad frame magic {magic:#010x}");
        }
        let fd = take(&mut rest, 2)?;
        let (flg, bd) = (fd[0], fd[1]);
        if flg >> 6 != 1 {
            return corrupt!("lz4: unsupported frame version");
        }
        let max_block = match (bd >> 4) & 0x7 {
            4 => 64 << 10,
            5 => 256 << 10,
            6 => 1 << 20,
            7 => 4 << 20,
            b => return corrupt!("lz4: bad block size id {b}"),
        };
        let block_checksum = if flg & 0x10 != 0 { 4 } else { 0 };
        let content_checksum = if flg & 0x04 != 0 { 4 } else { 0 };
        let content_size = if flg & 0x08 != 0 { 8 } else { 0 };
        let dict_id = if flg & 0x01 != 0 { 4 } else { 0 };
        take(&mut rest, content_size + dict_id + 1)?; // + header checksum
        loop {
            let size = le32(take(&mut rest, 4)?);
            if size == 0 {
                break; // end mark
            }
            let len = (size & 0x7FFF_FFFF) as usize;
            if len > max_block {
                return corrupt!("lz4: block of {len} bytes exceeds the frame's {max_block}");
            }
            take(&mut rest, len + block_checksum)?;
        }
        take(&mut rest, content_checksum)?;
    }
    Ok(())
}

/// Snappy as Kafka producers send it: Xerial-framed blocks, or (some
/// non-Java clients) a single raw snappy block. Each block declares its
/// uncompressed length up front, which is checked against the remaining
/// budget before anything is allocated.
fn decompress_snappy(data: &[u8], max_out: usize) -> Result<Vec<u8>> {
    let mut dec = snap::raw::Decoder::new();
    let mut out = Vec::new();
    let mut push_block = |block: &[u8], out: &mut Vec<u8>| -> Result<()> {
        let n = snap::raw::decompress_len(block).map_err(snappy_err)?;
        if n > max_out - out.len() {
            return too_big(max_out);
        }
        let start = out.len();
        out.resize(start + n, 0);
        let written = dec
            .decompress(block, &mut out[start..])
            .map_err(snappy_err)?;
        if written != n {
            return corrupt!("snappy block declared {n} bytes but produced {written}");
        }
        Ok(())
    };
    if data.len() >= XERIAL_HEADER_LEN && data[..8] == XERIAL_MAGIC {
        let mut rest = &data[XERIAL_HEADER_LEN..];
        while !rest.is_empty() {
            let Some((len, tail)) = rest.split_first_chunk::<4>() else {
                return corrupt!("snappy: truncated xerial block length");
            };
            let len = i32::from_be_bytes(*len);
            if len < 0 || len as usize > tail.len() {
                return corrupt!(
                    "snappy: xerial block length {len} with {} bytes left",
                    tail.len()
                );
            }
            let (block, tail) = tail.split_at(len as usize);
            push_block(block, &mut out)?;
            rest = tail;
        }
    } else {
        push_block(data, &mut out)?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Counts bytes allocated by the current thread, so a test can check
    /// that decompressing a bomb did not allocate its output. Thread-local,
    /// so tests running in parallel do not disturb each other.
    mod probe {
        use std::alloc::{GlobalAlloc, Layout, System};
        use std::cell::Cell;

        pub struct Probe;
        thread_local! {
            static ALLOCATED: Cell<usize> = const { Cell::new(0) };
            static LARGEST: Cell<usize> = const { Cell::new(0) };
        }
        fn note(size: usize) {
            let _ = ALLOCATED.try_with(|a| a.set(a.get().saturating_add(size)));
            let _ = LARGEST.try_with(|l| l.set(l.get().max(size)));
        }
        // SAFETY: forwards every call to the system allocator unchanged; the
        // bookkeeping touches only const-initialised, drop-free thread locals.
        unsafe impl GlobalAlloc for Probe {
            unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
                note(layout.size());
                // SAFETY: same contract as our caller's.
                unsafe { System.alloc(layout) }
            }
            unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
                note(layout.size());
                // SAFETY: same contract as our caller's.
                unsafe { System.alloc_zeroed(layout) }
            }
            unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
                // SAFETY: same contract as our caller's.
                unsafe { System.dealloc(ptr, layout) }
            }
            unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
                note(new_size);
                // SAFETY: same contract as our caller's.
                unsafe { System.realloc(ptr, layout, new_size) }
            }
        }
        #[global_allocator]
        static GLOBAL: Probe = Probe;

        /// Runs `f`; returns its result, the bytes it allocated in total and
        /// its largest single allocation.
        pub fn measure<T>(f: impl FnOnce() -> T) -> (T, usize, usize) {
            ALLOCATED.with(|a| a.set(0));
            LARGEST.with(|l| l.set(0));
            let r = f();
            (r, ALLOCATED.with(|a| a.get()), LARGEST.with(|l| l.get()))
        }
    }

    fn sample(len: usize) -> Vec<u8> {
        // Compressible but not trivial: words with a counter.
        let mut v = Vec::with_capacity(len);
        let mut i = 0u32;
        while v.len() < len {
            v.extend_from_slice(format!("record-{} value {} ", i % 97, i).as_bytes());
            i += 1;
        }
        v.truncate(len);
        v
    }

    #[test]
    fn codec_ids() {
        for c in Codec::ALL {
            assert_eq!(Codec::from_id(c as u8).unwrap(), c);
            assert_eq!(Codec::from_attributes(c as i16 | 0x7ff8).unwrap(), c);
        }
        for id in 5..8 {
            assert!(matches!(
                Codec::from_attributes(id),
                Err(Error::CorruptRecord(_))
            ));
        }
    }

    #[test]
    fn round_trip_every_codec() {
        for len in [0usize, 1, 100, 32 * 1024, 32 * 1024 + 1, 300_000] {
            let d = sample(len);
            for c in Codec::ALL {
                let z = compress(c, &d).unwrap();
                assert_eq!(decompress(c, &z, len).unwrap(), d, "{c:?} len={len}");
                if len > 0 {
                    assert!(decompress(c, &z, len - 1).is_err(), "{c:?} bound len={len}");
                }
            }
        }
    }

    #[test]
    fn xerial_framing_layout() {
        let z = compress(Codec::Snappy, &sample(70_000)).unwrap();
        assert_eq!(&z[..8], &XERIAL_MAGIC);
        assert_eq!(&z[8..16], &[0, 0, 0, 1, 0, 0, 0, 1]);
        let first = i32::from_be_bytes(z[16..20].try_into().unwrap()) as usize;
        let block = &z[20..20 + first];
        assert_eq!(snap::raw::decompress_len(block).unwrap(), XERIAL_BLOCK);
    }

    #[test]
    fn raw_snappy_is_accepted() {
        let d = sample(50_000);
        let raw = snap::raw::Encoder::new().compress_vec(&d).unwrap();
        assert_eq!(decompress(Codec::Snappy, &raw, 1 << 20).unwrap(), d);
    }

    #[test]
    fn interop_with_reference_decoders() {
        // What we write must be readable by each format's stock decoder.
        let d = sample(200_000);
        let z = compress(Codec::Gzip, &d).unwrap();
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(&z[..])
            .read_to_end(&mut out)
            .unwrap();
        assert_eq!(out, d);
        let z = compress(Codec::Zstd, &d).unwrap();
        assert_eq!(zstd::stream::decode_all(&z[..]).unwrap(), d);
        let z = compress(Codec::Lz4, &d).unwrap();
        let mut out = Vec::new();
        lz4_flex::frame::FrameDecoder::new(&z[..])
            .read_to_end(&mut out)
            .unwrap();
        assert_eq!(out, d);
        // LZ4 frame magic 0x184D2204 (little endian).
        assert_eq!(&z[..4], &[0x04, 0x22, 0x4d, 0x18]);
    }

    #[test]
    fn truncated_and_garbage_inputs_fail() {
        let d = sample(100_000);
        for c in [Codec::Gzip, Codec::Snappy, Codec::Lz4, Codec::Zstd] {
            let z = compress(c, &d).unwrap();
            for cut in [1usize, 7, 15, 17, z.len() / 2, z.len() - 1] {
                assert!(
                    decompress(c, &z[..cut], 1 << 20).is_err(),
                    "{c:?} cut={cut}"
                );
            }
            let garbage: Vec<u8> = (0..1000u32)
                .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
                .collect();
            assert!(decompress(c, &garbage, 1 << 20).is_err(), "{c:?} garbage");
        }
        // Xerial header followed by a negative or oversized block length.
        let mut x = XERIAL_MAGIC.to_vec();
        x.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 1]);
        let mut neg = x.clone();
        neg.extend_from_slice(&(-5i32).to_be_bytes());
        assert!(decompress(Codec::Snappy, &neg, 1 << 20).is_err());
        let mut big = x.clone();
        big.extend_from_slice(&1000i32.to_be_bytes());
        big.extend_from_slice(&[0; 10]);
        assert!(decompress(Codec::Snappy, &big, 1 << 20).is_err());
        let mut short = x;
        short.extend_from_slice(&[0, 0]);
        assert!(decompress(Codec::Snappy, &short, 1 << 20).is_err());
    }

    /// 1 GiB of zeros in each codec's framing, built without holding 1 GiB:
    /// one compressed piece repeated (gzip members, zstd and lz4 frames and
    /// xerial blocks may all be concatenated).
    fn gib_bomb(c: Codec) -> Vec<u8> {
        let piece_len = 16 << 20;
        let zeros = vec![0u8; piece_len];
        let (prefix, piece) = match c {
            Codec::Snappy => {
                let raw = snap::raw::Encoder::new().compress_vec(&zeros).unwrap();
                let mut block = (raw.len() as i32).to_be_bytes().to_vec();
                block.extend_from_slice(&raw);
                let mut h = XERIAL_MAGIC.to_vec();
                h.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 1]);
                (h, block)
            }
            _ => (Vec::new(), compress(c, &zeros).unwrap()),
        };
        let mut bomb = prefix;
        for _ in 0..(1usize << 30) / piece_len {
            bomb.extend_from_slice(&piece);
        }
        bomb
    }

    #[test]
    fn bombs_are_refused_at_the_bound() {
        const BOUND: usize = 1 << 20;
        for c in [Codec::Gzip, Codec::Snappy, Codec::Lz4, Codec::Zstd] {
            let bomb = gib_bomb(c);
            let (r, total, largest) = probe::measure(|| decompress(c, &bomb, BOUND));
            match r {
                Err(Error::CorruptRecord(m)) => assert!(m.contains("exceeds"), "{c:?}: {m}"),
                other => panic!("{c:?}: expected refusal, got {:?}", other.map(|v| v.len())),
            }
            // Output buffer at most BOUND+1; codec buffers (lz4 blocks) a few MiB.
            assert!(largest <= 8 << 20, "{c:?}: largest allocation {largest}");
            assert!(total <= 24 << 20, "{c:?}: allocated {total} in total");
        }
        // A raw snappy block declaring 1 GiB is refused from its header alone.
        let mut raw = Vec::new();
        crate::varint::encode_unsigned_varint(1 << 30, &mut raw);
        raw.extend_from_slice(&[0u8; 32]);
        let (r, total, _) = probe::measure(|| decompress(Codec::Snappy, &raw, BOUND));
        assert!(matches!(r, Err(Error::CorruptRecord(m)) if m.contains("exceeds")));
        assert!(total < 4096, "allocated {total}");
    }

    #[test]
    fn window_limit() {
        assert_eq!(zstd_window_log_max(0), 23);
        assert_eq!(zstd_window_log_max(1 << 20), 23);
        assert_eq!(zstd_window_log_max((1 << 25) + 1), 26);
        assert_eq!(zstd_window_log_max(usize::MAX), 27);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        #[test]
        fn round_trip_random(d in proptest::collection::vec(any::<u8>(), 0..5000), id in 0u8..5) {
            let c = Codec::from_id(id).unwrap();
            let z = compress(c, &d).unwrap();
            prop_assert_eq!(decompress(c, &z, d.len()).unwrap(), d);
        }

        #[test]
        fn garbage_never_panics(d in proptest::collection::vec(any::<u8>(), 0..512), id in 0u8..5) {
            let _ = decompress(Codec::from_id(id).unwrap(), &d, 1 << 16);
        }
    }
}
