//! sendfile(2) to real loopback sockets.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsRawFd;

use kbroker::sendfile::{sendfile, SendOutcome};
use kbroker::Error;

fn pair() -> (TcpStream, TcpStream) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let (server, _) = listener.accept().unwrap();
    (client, server)
}

fn data_file(len: usize) -> (tempfile::NamedTempFile, Vec<u8>) {
    let data: Vec<u8> = (0..len).map(|i| (i * 7 + i / 251) as u8).collect();
    let mut f = tempfile::NamedTempFile::new().unwrap();
    f.write_all(&data).unwrap();
    f.flush().unwrap();
    (f, data)
}

#[test]
fn sends_a_file_range_to_a_socket() {
    let (f, data) = data_file(3 << 20);
    let (mut rx, tx) = pair();
    let reader = std::thread::spawn(move || {
        let mut got = Vec::new();
        rx.read_to_end(&mut got).unwrap();
        got
    });
    let (from, count) = (12_345u64, (2 << 20) + 17);
    let mut sent = 0;
    while sent < count {
        match sendfile(
            tx.as_raw_fd(),
            f.as_file().as_raw_fd(),
            from + sent as u64,
            count - sent,
        )
        .unwrap()
        {
            SendOutcome::Sent(n) => sent += n,
            SendOutcome::WouldBlock => unreachable!("blocking socket"),
        }
    }
    // Past the end of the file: only what exists.
    let tail = sendfile(
        tx.as_raw_fd(),
        f.as_file().as_raw_fd(),
        data.len() as u64 - 10,
        100,
    )
    .unwrap();
    assert_eq!(tail, SendOutcome::Sent(10));
    drop(tx);
    let got = reader.join().unwrap();
    assert_eq!(got.len(), count + 10);
    assert_eq!(&got[..count], &data[from as usize..from as usize + count]);
    assert_eq!(&got[count..], &data[data.len() - 10..]);
}

#[test]
fn non_blocking_socket_reports_partial_sends_then_would_block() {
    let (f, data) = data_file(8 << 20);
    let (mut rx, tx) = pair();
    tx.set_nonblocking(true).unwrap();
    let small: libc::c_int = 4096;
    // SAFETY: setsockopt on a live socket with a valid int.
    let r = unsafe {
        libc::setsockopt(
            tx.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_SNDBUF,
            (&small as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    assert_eq!(r, 0);
    // Nobody reads: the first call sends part, later calls would block.
    let first = sendfile(tx.as_raw_fd(), f.as_file().as_raw_fd(), 0, data.len()).unwrap();
    let SendOutcome::Sent(n) = first else {
        panic!("{first:?}")
    };
    assert!(n > 0 && n < data.len(), "{n}");
    let mut sent = n;
    let mut blocked = false;
    for _ in 0..100 {
        match sendfile(
            tx.as_raw_fd(),
            f.as_file().as_raw_fd(),
            sent as u64,
            data.len() - sent,
        )
        .unwrap()
        {
            SendOutcome::WouldBlock => {
                blocked = true;
                break;
            }
            SendOutcome::Sent(m) => sent += m,
        }
    }
    assert!(blocked);
    // Drain and finish; every byte arrives in order.
    let reader = std::thread::spawn(move || {
        let mut got = Vec::new();
        rx.read_to_end(&mut got).unwrap();
        got
    });
    while sent < data.len() {
        match sendfile(
            tx.as_raw_fd(),
            f.as_file().as_raw_fd(),
            sent as u64,
            data.len() - sent,
        )
        .unwrap()
        {
            SendOutcome::Sent(m) => sent += m,
            SendOutcome::WouldBlock => std::thread::sleep(std::time::Duration::from_millis(1)),
        }
    }
    drop(tx);
    assert_eq!(reader.join().unwrap(), data);
}

#[test]
fn bad_descriptors_are_io_errors_with_errno() {
    let (f, _) = data_file(100);
    let (_rx, tx) = pair();
    for (out_fd, in_fd) in [(-1, f.as_file().as_raw_fd()), (tx.as_raw_fd(), 987_654)] {
        match sendfile(out_fd, in_fd, 0, 10) {
            Err(Error::Io(e)) => assert_eq!(e.raw_os_error(), Some(libc::EBADF)),
            other => panic!("{other:?}"),
        }
    }
}
