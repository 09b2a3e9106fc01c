//! Protobuf-style variable-length integers, as used by record batch v2
//! (signed, zigzag: `varint` = i32, `varlong` = i64) and by the flexible
//! protocol versions (unsigned: compact lengths, tagged fields).
//!
//! Decoding is the attack surface (every length in a record comes through
//! here), so it is bounds checked and never panics:
//!
//! * input cut short -> `Error::Varint("truncated ...")`;
//! * more than 5 bytes (varint) / 10 bytes (varlong) -> `Error::Varint`;
//! * a last byte carrying bits beyond the type's width (e.g. a 5th varint
//!   byte above 0x0F) -> `Error::Varint`: no encoder emits those and they
//!   would otherwise be silently truncated;
//! * non-minimal encodings within the length limit (`0x80 0x00` for 0) are
//!   accepted, like the Java client and protobuf do.
//!
//! Decoders return `(value, bytes_used)` so callers can advance a cursor.

use crate::error::{Error, Result};

/// Most bytes a 32-bit varint may take.
pub const MAX_VARINT_LEN: usize = 5;
/// Most bytes a 64-bit varlong may take.
pub const MAX_VARLONG_LEN: usize = 10;

#[inline]
fn zigzag32(v: i32) -> u32 {
    ((v << 1) ^ (v >> 31)) as u32
}
#[inline]
fn unzigzag32(u: u32) -> i32 {
    ((u >> 1) as i32) ^ -((u & 1) as i32)
}
#[inline]
fn zigzag64(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}
#[inline]
fn unzigzag64(u: u64) -> i64 {
    ((u >> 1) as i64) ^ -((u & 1) as i64)
}

/// Appends `v` as an unsigned LEB128 varint (flexible-version lengths).
#[inline]
pub fn encode_unsigned_varint(v: u32, out: &mut Vec<u8>) {
    encode_unsigned_varlong(v as u64, out)
}

/// Appends `v` as an unsigned LEB128 varlong.
#[inline]
pub fn encode_unsigned_varlong(mut v: u64, out: &mut Vec<u8>) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Appends `v` zigzag-encoded (record v2 `varint`).
#[inline]
pub fn encode_varint(v: i32, out: &mut Vec<u8>) {
    encode_unsigned_varint(zigzag32(v), out)
}

/// Appends `v` zigzag-encoded (record v2 `varlong`).
#[inline]
pub fn encode_varlong(v: i64, out: &mut Vec<u8>) {
    encode_unsigned_varlong(zigzag64(v), out)
}

/// Bytes [`encode_unsigned_varlong`] writes for `v`.
#[inline]
pub fn unsigned_varlong_size(v: u64) -> usize {
    // 1 byte per started group of 7 significant bits, at least 1.
    let bits = 64 - (v | 1).leading_zeros() as usize;
    bits.div_ceil(7)
}
/// Bytes [`encode_unsigned_varint`] writes for `v`.
#[inline]
pub fn unsigned_varint_size(v: u32) -> usize {
    unsigned_varlong_size(v as u64)
}
/// Bytes [`encode_varint`] writes for `v`.
#[inline]
pub fn varint_size(v: i32) -> usize {
    unsigned_varint_size(zigzag32(v))
}
/// Bytes [`encode_varlong`] writes for `v`.
#[inline]
pub fn varlong_size(v: i64) -> usize {
    unsigned_varlong_size(zigzag64(v))
}

/// Decodes an unsigned LEB128 of at most `max_len` bytes whose value fits in
/// `bits` bits.
#[inline(always)]
fn decode_raw(buf: &[u8], max_len: usize, bits: u32, what: &'static str) -> Result<(u64, usize)> {
    // Fast path: one byte (small lengths, deltas, counts: most of a record).
    match buf.first() {
        Some(&b) if b < 0x80 => return Ok((b as u64, 1)),
        None => return Err(Error::Varint(what)),
        _ => {}
    }
    let mut value = 0u64;
    for (i, &b) in buf.iter().take(max_len).enumerate() {
        let shift = 7 * i as u32;
        value |= ((b & 0x7f) as u64) << shift;
        if b < 0x80 {
            if i + 1 == max_len && (b as u64) >> (bits - shift) != 0 {
                return Err(Error::Varint("value overflows its type"));
            }
            return Ok((value, i + 1));
        }
    }
    if buf.len() < max_len {
        Err(Error::Varint(what))
    } else {
        Err(Error::Varint("too many bytes"))
    }
}

/// Decodes an unsigned varint (u32) from the start of `buf`.
#[inline]
pub fn decode_unsigned_varint(buf: &[u8]) -> Result<(u32, usize)> {
    let (v, n) = decode_raw(buf, MAX_VARINT_LEN, 32, "truncated varint")?;
    Ok((v as u32, n))
}

/// Decodes an unsigned varlong (u64) from the start of `buf`.
#[inline]
pub fn decode_unsigned_varlong(buf: &[u8]) -> Result<(u64, usize)> {
    decode_raw(buf, MAX_VARLONG_LEN, 64, "truncated varlong")
}

/// Decodes a zigzag varint (i32) from the start of `buf`.
#[inline]
pub fn decode_varint(buf: &[u8]) -> Result<(i32, usize)> {
    let (u, n) = decode_unsigned_varint(buf)?;
    Ok((unzigzag32(u), n))
}

/// Decodes a zigzag varlong (i64) from the start of `buf`.
#[inline]
pub fn decode_varlong(buf: &[u8]) -> Result<(i64, usize)> {
    let (u, n) = decode_unsigned_varlong(buf)?;
    Ok((unzigzag64(u), n))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn enc32(v: i32) -> Vec<u8> {
        let mut o = Vec::new();
        encode_varint(v, &mut o);
        o
    }

    #[test]
    fn known_encodings() {
        assert_eq!(enc32(0), [0x00]);
        assert_eq!(enc32(-1), [0x01]);
        assert_eq!(enc32(1), [0x02]);
        assert_eq!(enc32(-64), [0x7f]);
        assert_eq!(enc32(64), [0x80, 0x01]);
        assert_eq!(enc32(i32::MAX), [0xfe, 0xff, 0xff, 0xff, 0x0f]);
        assert_eq!(enc32(i32::MIN), [0xff, 0xff, 0xff, 0xff, 0x0f]);
        let mut o = Vec::new();
        encode_varlong(i64::MIN, &mut o);
        assert_eq!(
            o,
            [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01]
        );
        let mut o = Vec::new();
        encode_unsigned_varint(300, &mut o);
        assert_eq!(o, [0xac, 0x02]);
    }

    #[test]
    fn extremes_round_trip() {
        for v in [
            0,
            1,
            -1,
            63,
            -64,
            64,
            -65,
            i32::MAX,
            i32::MIN,
            i32::MAX - 1,
            i32::MIN + 1,
        ] {
            let e = enc32(v);
            assert_eq!(e.len(), varint_size(v));
            assert_eq!(decode_varint(&e).unwrap(), (v, e.len()));
        }
        for v in [
            0i64,
            -1,
            i64::MAX,
            i64::MIN,
            i32::MAX as i64 + 1,
            i32::MIN as i64 - 1,
        ] {
            let mut e = Vec::new();
            encode_varlong(v, &mut e);
            assert_eq!(e.len(), varlong_size(v));
            assert_eq!(decode_varlong(&e).unwrap(), (v, e.len()));
        }
        for v in [0u32, 127, 128, u32::MAX] {
            let mut e = Vec::new();
            encode_unsigned_varint(v, &mut e);
            assert_eq!(e.len(), unsigned_varint_size(v));
            assert_eq!(decode_unsigned_varint(&e).unwrap(), (v, e.len()));
        }
    }

    #[test]
    fn truncated_is_an_error() {
        assert!(matches!(decode_varint(&[]), Err(Error::Varint(_))));
        assert!(matches!(decode_varint(&[0x80]), Err(Error::Varint(_))));
        assert!(matches!(
            decode_varint(&[0xff, 0xff, 0xff, 0xff]),
            Err(Error::Varint(_))
        ));
        assert!(matches!(decode_varlong(&[0xff; 9]), Err(Error::Varint(_))));
        assert!(matches!(
            decode_unsigned_varint(&[0x80, 0x80]),
            Err(Error::Varint(_))
        ));
    }

    #[test]
    fn overlong_is_an_error() {
        // Six bytes for a 32-bit varint.
        assert!(matches!(
            decode_varint(&[0x80, 0x80, 0x80, 0x80, 0x80, 0x00]),
            Err(Error::Varint(_))
        ));
        // Eleven bytes for a varlong.
        let mut b = vec![0x80u8; 10];
        b.push(0);
        assert!(matches!(decode_varlong(&b), Err(Error::Varint(_))));
        // A 5th byte carrying more than the top 4 bits of a u32.
        assert!(matches!(
            decode_varint(&[0xff, 0xff, 0xff, 0xff, 0x1f]),
            Err(Error::Varint(_))
        ));
        // A 10th byte carrying more than the top bit of a u64.
        let mut b = vec![0xffu8; 9];
        b.push(0x02);
        assert!(matches!(decode_varlong(&b), Err(Error::Varint(_))));
    }

    #[test]
    fn non_minimal_within_limit_is_accepted() {
        assert_eq!(decode_varint(&[0x80, 0x00]).unwrap(), (0, 2));
        assert_eq!(
            decode_varint(&[0x82, 0x80, 0x80, 0x80, 0x00]).unwrap(),
            (1, 5)
        );
    }

    #[test]
    fn trailing_bytes_are_left_alone() {
        assert_eq!(decode_varint(&[0x02, 0xff, 0xff]).unwrap(), (1, 1));
    }

    proptest! {
        #[test]
        fn varint_round_trip(v in any::<i32>(), tail in proptest::collection::vec(any::<u8>(), 0..4)) {
            let mut e = enc32(v);
            let n = e.len();
            prop_assert_eq!(n, varint_size(v));
            e.extend_from_slice(&tail);
            prop_assert_eq!(decode_varint(&e).unwrap(), (v, n));
            for cut in 0..n {
                prop_assert!(decode_varint(&e[..cut]).is_err());
            }
        }

        #[test]
        fn varlong_round_trip(v in any::<i64>()) {
            let mut e = Vec::new();
            encode_varlong(v, &mut e);
            prop_assert_eq!(e.len(), varlong_size(v));
            prop_assert_eq!(decode_varlong(&e).unwrap(), (v, e.len()));
            for cut in 0..e.len() {
                prop_assert!(decode_varlong(&e[..cut]).is_err());
            }
        }

        #[test]
        fn unsigned_round_trip(v in any::<u32>(), w in any::<u64>()) {
            let mut e = Vec::new();
            encode_unsigned_varint(v, &mut e);
            prop_assert_eq!(decode_unsigned_varint(&e).unwrap(), (v, e.len()));
            let mut e = Vec::new();
            encode_unsigned_varlong(w, &mut e);
            prop_assert_eq!(e.len(), unsigned_varlong_size(w));
            prop_assert_eq!(decode_unsigned_varlong(&e).unwrap(), (w, e.len()));
        }

        #[test]
        fn arbitrary_bytes_never_panic(b in proptest::collection::vec(any::<u8>(), 0..16)) {
            if let Ok((_, n)) = decode_varint(&b) { prop_assert!((1..=5).contains(&n)); }
            if let Ok((_, n)) = decode_varlong(&b) { prop_assert!((1..=10).contains(&n)); }
        }
    }
}
