//! Hot-path microbenchmarks for kbroker-core: CRC-32C and batch validation.
//!
//! Run: `cargo run --release -p kbroker-core --example crc32c`
//! Prints one JSON object per line so results can be collected by scripts.

use std::hint::black_box;

use kbroker::compression::Codec;
use kbroker::records::{validate_batch, BatchBuilder, ValidateOptions, HEADER_SIZE};
use std::time::{Duration, Instant};

/// Runs `f` repeatedly for about `budget` and returns the best per-call time
/// over several rounds (the best round filters out scheduler noise).
fn time_per_call(budget: Duration, mut f: impl FnMut()) -> f64 {
    // Calibrate: how many calls fit in ~1/10 of the budget.
    let mut iters = 1u64;
    loop {
        let t = Instant::now();
        for _ in 0..iters {
            f();
        }
        if t.elapsed() > budget / 50 {
            break;
        }
        iters *= 2;
    }
    let mut best = f64::INFINITY;
    for _ in 0..10 {
        let t = Instant::now();
        for _ in 0..iters {
            f();
        }
        best = best.min(t.elapsed().as_secs_f64() / iters as f64);
    }
    best
}

fn data(len: usize) -> Vec<u8> {
    let mut s = 0x2545_F491_4F6C_DD1Du64;
    (0..len)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s as u8
        })
        .collect()
}

type CrcFn = fn(&[u8]) -> u32;

fn crc_benches() {
    let budget = Duration::from_millis(400);
    let impls: [(&str, CrcFn); 3] = [
        ("kbroker", |d| kbroker::crc32c::crc32c(d)),
        ("kbroker-portable", |d| {
            kbroker::crc32c::crc32c_portable(0, d)
        }),
        ("crc32c-crate", |d| crc32c::crc32c(d)),
    ];
    for size in [1024usize, 1 << 20] {
        let buf = data(size);
        for (name, f) in impls {
            let t = time_per_call(budget, || {
                black_box(f(black_box(&buf)));
            });
            println!(
                "{{\"bench\":\"crc32c\",\"impl\":\"{name}\",\"dispatch\":\"{}\",\"bytes\":{size},\"gb_per_s\":{:.2}}}",
                kbroker::crc32c::implementation_name(),
                size as f64 / t / 1e9
            );
        }
    }
}

/// A batch of about `target` bytes holding records of about 100 bytes each
/// (10-byte key, 80-byte value, one small header every tenth record).
fn batch_of(codec: Codec, target: usize) -> Vec<u8> {
    let payload = data(target);
    let mut b = BatchBuilder::new(codec, 0, 1_700_000_000_000);
    let mut i = 0usize;
    let mut approx = HEADER_SIZE;
    while approx + 100 <= target {
        let key = format!("key-{i:06}");
        let value = &payload[(i * 80) % (target - 80)..][..80];
        let hdr = [("src", Some(b"bench".as_slice()))];
        let headers: &[(&str, Option<&[u8]>)] = if i % 10 == 0 { &hdr } else { &[] };
        b.push(
            1_700_000_000_000 + i as i64,
            Some(key.as_bytes()),
            Some(value),
            headers,
        );
        approx += 100;
        i += 1;
    }
    b.build().expect("bench batch")
}

fn validate_benches() {
    let budget = Duration::from_millis(400);
    let opts = ValidateOptions {
        max_batch_bytes: 1 << 20,
        ..ValidateOptions::default()
    };
    for codec in Codec::ALL {
        let batch = batch_of(codec, 16 * 1024);
        let uncompressed = batch_of(Codec::None, 16 * 1024).len();
        let info = validate_batch(&batch, &opts).expect("valid");
        let t = time_per_call(budget, || {
            black_box(validate_batch(black_box(&batch), &opts).unwrap());
        });
        println!(
            "{{\"bench\":\"validate_batch\",\"codec\":\"{}\",\"inspect_compressed\":true,\"records\":{},\"batch_bytes\":{},\"uncompressed_bytes\":{uncompressed},\"mb_per_s\":{:.0},\"batches_per_s\":{:.0}}}",
            codec.name(),
            info.records_count,
            batch.len(),
            uncompressed as f64 / t / 1e6,
            1.0 / t
        );
    }
}

fn main() {
    crc_benches();
    validate_benches();
}
