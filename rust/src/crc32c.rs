//! CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), the checksum of
//! record batch v2.
//!
//! Every produced batch is checksummed once on the way in and possibly again
//! on recovery, so this sits on the hot path. Two implementations:
//!
//! * a portable slicing-by-16 table walk ([`crc32c_portable`]), about
//!   4-6 GB/s on a modern core;
//! * on x86-64 with SSE4.2 + PCLMULQDQ, the `crc32` instruction on three
//!   independent streams at once. The instruction has a latency of about
//!   3 cycles but a throughput of 1 per cycle, so one stream leaves two
//!   thirds of the unit idle; three streams keep it busy (8 bytes a cycle).
//!   The three partial CRCs are merged with a carry-less multiply by
//!   `x^(8n)` (see [`shift_const`]), which costs a few cycles per block.
//!
//! The choice is made once at runtime and cached.
//!
//! Notation: a CRC register is a polynomial over GF(2) of degree < 32 stored
//! *reflected*: bit `i` holds the coefficient of `x^(31-i)`. Without the
//! initial/final inversion, the CRC register is linear in its input, and
//! running it over `n` zero bytes multiplies it by `x^(8n)` mod P. That is
//! what lets independent streams be merged.

use std::sync::OnceLock;

/// The reflected Castagnoli polynomial, without its `x^32` term.
const POLY: u32 = 0x82F6_3B78;

/// Multiplies a reflected polynomial by `x`, modulo P.
const fn times_x(v: u32) -> u32 {
    if v & 1 != 0 {
        (v >> 1) ^ POLY
    } else {
        v >> 1
    }
}

/// `a * b mod P` for reflected polynomials (bitwise; used only in const
/// evaluation and tests).
const fn mul_mod(a: u32, b: u32) -> u32 {
    let mut r = 0u32;
    let mut bx = b; // b * x^i
    let mut i = 0;
    while i < 32 {
        if a & (0x8000_0000 >> i) != 0 {
            r ^= bx;
        }
        bx = times_x(bx);
        i += 1;
    }
    r
}

/// `x^e mod P`, reflected, by square-and-multiply.
const fn x_pow_mod(mut e: u64) -> u32 {
    let mut result = 0x8000_0000u32; // 1
    let mut base = 0x4000_0000u32; // x
    while e != 0 {
        if e & 1 != 0 {
            result = mul_mod(result, base);
        }
        base = mul_mod(base, base);
        e >>= 1;
    }
    result
}

/// The constant that moves a CRC register forward over `n` zero bytes when
/// used with the hardware path: `clmul(v, K)` yields the reflected 64-bit
/// product `v * K * x` and `crc32(0, t)` reduces `t * x^32`, so
/// `K = x^(8n - 33)` gives `v * x^(8n)` mod P.
const fn shift_const(n: usize) -> u32 {
    x_pow_mod(8 * n as u64 - 33)
}

/// Slicing-by-16 tables: `TABLES[k][b]` is the CRC register after byte `b`
/// followed by `k` zero bytes.
static TABLES: [[u32; 256]; 16] = make_tables();

const fn make_tables() -> [[u32; 256]; 16] {
    let mut t = [[0u32; 256]; 16];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u32;
        let mut k = 0;
        while k < 8 {
            c = times_x(c);
            k += 1;
        }
        t[0][i] = c;
        i += 1;
    }
    let mut k = 1;
    while k < 16 {
        let mut i = 0;
        while i < 256 {
            let prev = t[k - 1][i];
            t[k][i] = (prev >> 8) ^ t[0][(prev & 0xff) as usize];
            i += 1;
        }
        k += 1;
    }
    t
}

/// CRC-32C of `data`.
#[inline]
pub fn crc32c(data: &[u8]) -> u32 {
    crc32c_append(0, data)
}

/// Continues a CRC-32C: `crc32c_append(crc32c(a), b) == crc32c(a ++ b)`.
#[inline]
pub fn crc32c_append(crc: u32, data: &[u8]) -> u32 {
    let imp = *IMPL.get_or_init(select);
    !imp(!crc, data)
}

/// The CRC-32C of `a ++ b` from `crc32c(a)`, `crc32c(b)` and `b.len()`,
/// without touching the bytes (a few hundred cycles, independent of size).
pub fn crc32c_combine(crc_a: u32, crc_b: u32, len_b: usize) -> u32 {
    // With the register's inversions worked through, crc(a ++ b) =
    // crc(a) * x^(8 len_b) + crc(b) (mod P).
    mul_mod(crc_a, x_pow_mod(8 * len_b as u64)) ^ crc_b
}

/// The change in a CRC-32C when a message's first `delta.len()` bytes are
/// XORed with `delta` and `trailing` unchanged bytes follow. The CRC is
/// linear, so for equal-length messages `crc(m') = crc(m) ^
/// crc32c_delta(m ^ m')`; this lets a field be rewritten without reading
/// (and so without vouching for) the rest of the message.
pub fn crc32c_delta(delta: &[u8], trailing: usize) -> u32 {
    mul_mod(raw_portable(0, delta), x_pow_mod(8 * trailing as u64))
}

/// Which implementation [`crc32c`] uses on this machine ("sse4.2+pclmul"
/// or "portable"); for benchmarks and logs.
pub fn implementation_name() -> &'static str {
    let imp = *IMPL.get_or_init(select);
    if std::ptr::fn_addr_eq(imp, raw_portable as Kernel) {
        "portable"
    } else {
        "sse4.2+pclmul"
    }
}

/// The table-driven CRC-32C, whatever the CPU. Same contract as
/// [`crc32c_append`]; public so tests and benchmarks can compare.
pub fn crc32c_portable(crc: u32, data: &[u8]) -> u32 {
    !raw_portable(!crc, data)
}

/// A CRC kernel over the raw (already inverted) register.
type Kernel = fn(u32, &[u8]) -> u32;

static IMPL: OnceLock<Kernel> = OnceLock::new();

fn select() -> Kernel {
    #[cfg(target_arch = "x86_64")]
    {
        if std::is_x86_feature_detected!("sse4.2") && std::is_x86_feature_detected!("pclmulqdq") {
            return x86::raw_hw_entry;
        }
    }
    raw_portable
}

fn raw_portable(mut c: u32, data: &[u8]) -> u32 {
    let t = &TABLES;
    let mut chunks = data.chunks_exact(16);
    for ch in &mut chunks {
        let mut a = [0u8; 16];
        a.copy_from_slice(ch);
        let w = |i: usize| u32::from_le_bytes([a[i], a[i + 1], a[i + 2], a[i + 3]]);
        let w0 = w(0) ^ c;
        let (w1, w2, w3) = (w(4), w(8), w(12));
        c = t[15][(w0 & 0xff) as usize]
            ^ t[14][((w0 >> 8) & 0xff) as usize]
            ^ t[13][((w0 >> 16) & 0xff) as usize]
            ^ t[12][(w0 >> 24) as usize]
            ^ t[11][(w1 & 0xff) as usize]
            ^ t[10][((w1 >> 8) & 0xff) as usize]
            ^ t[9][((w1 >> 16) & 0xff) as usize]
            ^ t[8][(w1 >> 24) as usize]
            ^ t[7][(w2 & 0xff) as usize]
            ^ t[6][((w2 >> 8) & 0xff) as usize]
            ^ t[5][((w2 >> 16) & 0xff) as usize]
            ^ t[4][(w2 >> 24) as usize]
            ^ t[3][(w3 & 0xff) as usize]
            ^ t[2][((w3 >> 8) & 0xff) as usize]
            ^ t[1][((w3 >> 16) & 0xff) as usize]
            ^ t[0][(w3 >> 24) as usize];
    }
    for &b in chunks.remainder() {
        c = t[0][((c ^ b as u32) & 0xff) as usize] ^ (c >> 8);
    }
    c
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::shift_const;
    use core::arch::x86_64::{
        _mm_clmulepi64_si128, _mm_crc32_u64, _mm_crc32_u8, _mm_cvtsi128_si64, _mm_cvtsi32_si128,
        _mm_xor_si128,
    };

    /// Entry point stored in the dispatch slot.
    pub(super) fn raw_hw_entry(crc: u32, data: &[u8]) -> u32 {
        // SAFETY: `select` installs this kernel only after
        // `is_x86_feature_detected!` confirmed SSE4.2 and PCLMULQDQ.
        unsafe { raw_hw(crc, data) }
    }

    #[inline]
    fn le64(b: &[u8]) -> u64 {
        let mut w = [0u8; 8];
        w.copy_from_slice(&b[..8]);
        u64::from_le_bytes(w)
    }

    /// One stream, 8 bytes per instruction, then the byte tail.
    #[target_feature(enable = "sse4.2")]
    fn single(mut c: u32, data: &[u8]) -> u32 {
        let mut chunks = data.chunks_exact(8);
        for ch in &mut chunks {
            c = _mm_crc32_u64(c as u64, le64(ch)) as u32;
        }
        for &b in chunks.remainder() {
            c = _mm_crc32_u8(c, b);
        }
        c
    }

    /// Processes as many `3 * B`-byte superblocks as `data` holds, each as
    /// three interleaved streams of `B` bytes, and returns the new register
    /// and the unprocessed tail.
    #[inline]
    #[target_feature(enable = "sse4.2,pclmulqdq")]
    fn three_way<const B: usize>(mut c: u32, mut data: &[u8]) -> (u32, &[u8]) {
        let k1 = const { shift_const(B) } as i32; // moves the middle stream over B bytes
        let k2 = const { shift_const(2 * B) } as i32; // moves the first stream over 2B bytes
        let k1 = _mm_cvtsi32_si128(k1);
        let k2 = _mm_cvtsi32_si128(k2);
        while data.len() >= 3 * B {
            let (a, rest) = data.split_at(B);
            let (b, rest) = rest.split_at(B);
            let (d, rest) = rest.split_at(B);
            let (mut c0, mut c1, mut c2) = (c as u64, 0u64, 0u64);
            for ((x, y), z) in a
                .chunks_exact(8)
                .zip(b.chunks_exact(8))
                .zip(d.chunks_exact(8))
            {
                c0 = _mm_crc32_u64(c0, le64(x));
                c1 = _mm_crc32_u64(c1, le64(y));
                c2 = _mm_crc32_u64(c2, le64(z));
            }
            // c0 * x^(16B) + c1 * x^(8B), reduced by one crc32 of zero state.
            let p0 = _mm_clmulepi64_si128(_mm_cvtsi32_si128(c0 as u32 as i32), k2, 0x00);
            let p1 = _mm_clmulepi64_si128(_mm_cvtsi32_si128(c1 as u32 as i32), k1, 0x00);
            let t = _mm_cvtsi128_si64(_mm_xor_si128(p0, p1)) as u64;
            c = (_mm_crc32_u64(0, t) ^ c2) as u32;
            data = rest;
        }
        (c, data)
    }

    /// Below this many bytes the three-way split does not pay for its merge.
    const SMALL: usize = 192;

    #[target_feature(enable = "sse4.2,pclmulqdq")]
    fn raw_hw(c: u32, data: &[u8]) -> u32 {
        if data.len() < SMALL {
            return single(c, data);
        }
        let (c, data) = three_way::<4096>(c, data);
        let (c, data) = three_way::<512>(c, data);
        let (c, data) = three_way::<256>(c, data);
        let (c, data) = three_way::<64>(c, data);
        single(c, data)
    }

    #[cfg(test)]
    pub(super) fn raw_single(c: u32, data: &[u8]) -> Option<u32> {
        if std::is_x86_feature_detected!("sse4.2") {
            // SAFETY: SSE4.2 was just detected.
            Some(unsafe { single(c, data) })
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Bit-at-a-time reference, straight from the definition.
    fn reference(data: &[u8]) -> u32 {
        let mut c = !0u32;
        for &b in data {
            c ^= b as u32;
            for _ in 0..8 {
                c = times_x(c);
            }
        }
        !c
    }

    fn check_all(data: &[u8], expect: u32) {
        assert_eq!(crc32c(data), expect, "dispatched");
        assert_eq!(crc32c_portable(0, data), expect, "portable");
        assert_eq!(reference(data), expect, "reference");
    }

    #[test]
    fn check_value() {
        check_all(b"123456789", 0xE306_9283);
        check_all(b"", 0);
    }

    /// RFC 3720 (iSCSI) appendix B.4 vectors.
    #[test]
    fn rfc3720_vectors() {
        check_all(&[0u8; 32], 0x8A91_36AA);
        check_all(&[0xFFu8; 32], 0x62A8_AB43);
        let inc: Vec<u8> = (0u8..32).collect();
        check_all(&inc, 0x46DD_794E);
        let dec: Vec<u8> = (0u8..32).rev().collect();
        check_all(&dec, 0x113F_DB5C);
    }

    #[test]
    fn shift_constant_matches_zero_bytes() {
        // x^(8n) applied to a register equals running the raw CRC over n zeros.
        for n in [1usize, 5, 8, 64, 512, 4096] {
            let v = 0x1234_5678u32;
            let by_zeros = raw_portable(v, &vec![0u8; n]);
            let by_mul = mul_mod(v, x_pow_mod(8 * n as u64));
            assert_eq!(by_zeros, by_mul, "n={n}");
        }
    }

    fn pseudo_random(len: usize, seed: u64) -> Vec<u8> {
        let mut s = seed ^ 0x9E37_79B9_7F4A_7C15;
        (0..len)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                (s >> 24) as u8
            })
            .collect()
    }

    #[test]
    fn hardware_matches_portable_every_length() {
        let buf = pseudo_random(2048 + 64, 7);
        for len in 0..=2048 {
            for off in [0usize, 1, 3, 7] {
                let d = &buf[off..off + len];
                let p = crc32c_portable(0, d);
                assert_eq!(crc32c(d), p, "len={len} off={off}");
                if let Some(s) = x86_single(d) {
                    assert_eq!(s, p, "single len={len}");
                }
            }
        }
        for len in 0..300 {
            assert_eq!(crc32c(&buf[..len]), reference(&buf[..len]));
        }
    }

    #[cfg(target_arch = "x86_64")]
    fn x86_single(d: &[u8]) -> Option<u32> {
        x86::raw_single(!0, d).map(|c| !c)
    }
    #[cfg(not(target_arch = "x86_64"))]
    fn x86_single(_d: &[u8]) -> Option<u32> {
        None
    }

    #[test]
    fn large_buffers() {
        for len in [12_288usize, 12_289, 65_536 + 17, 1 << 20, (1 << 20) + 777] {
            let d = pseudo_random(len, len as u64);
            assert_eq!(crc32c(&d), crc32c_portable(0, &d), "len={len}");
        }
    }

    #[test]
    fn append_is_concatenation() {
        let d = pseudo_random(10_000, 3);
        let whole = crc32c(&d);
        for cut in [0usize, 1, 7, 100, 4095, 9_999, 10_000] {
            let c = crc32c_append(crc32c(&d[..cut]), &d[cut..]);
            assert_eq!(c, whole, "cut={cut}");
            assert_eq!(
                crc32c_portable(crc32c_portable(0, &d[..cut]), &d[cut..]),
                whole
            );
        }
    }

    #[test]
    fn combine_and_delta() {
        let d = pseudo_random(5000, 11);
        for cut in [0usize, 1, 100, 4999, 5000] {
            let (a, b) = d.split_at(cut);
            assert_eq!(crc32c_combine(crc32c(a), crc32c(b), b.len()), crc32c(&d));
        }
        // Rewrite bytes 10..14 and patch the CRC from the XOR difference.
        let mut m = d.clone();
        let new = [1u8, 2, 3, 4];
        let mut delta = vec![0u8; 14];
        for i in 0..4 {
            delta[10 + i] = m[10 + i] ^ new[i];
        }
        m[10..14].copy_from_slice(&new);
        assert_eq!(crc32c(&d) ^ crc32c_delta(&delta, d.len() - 14), crc32c(&m));
    }

    proptest! {
        #[test]
        fn hw_vs_portable(data in proptest::collection::vec(any::<u8>(), 0..70_000),
                          off in 0usize..64, seed in any::<u32>()) {
            let off = off.min(data.len());
            let d = &data[off..];
            prop_assert_eq!(crc32c_append(seed, d), crc32c_portable(seed, d));
        }

        #[test]
        fn split_anywhere(data in proptest::collection::vec(any::<u8>(), 0..5000), cut in any::<usize>()) {
            let cut = if data.is_empty() { 0 } else { cut % (data.len() + 1) };
            prop_assert_eq!(crc32c_append(crc32c(&data[..cut]), &data[cut..]), crc32c(&data));
        }
    }
}
