//! `TcpStream::read_buf`: a safe read into a `Vec`'s spare capacity.

use std::io::Write;

use weft::net::{TcpListener, TcpStream};

/// A connected pair on 127.0.0.1.
fn pair() -> (TcpStream, TcpStream) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let (server, _) = listener.accept().unwrap();
    (client, server)
}

#[test]
fn read_buf_appends_after_the_contents_and_grows_a_full_vec() {
    let result = weft::run(|| {
        let (client, server) = pair();
        (&client).write_all(b"hello").unwrap();
        let mut buf = Vec::with_capacity(64);
        buf.extend_from_slice(b"> ");
        let mut got = 0;
        while got < 5 {
            got += server.read_buf(&mut buf).unwrap();
        }
        assert_eq!(buf, b"> hello");
        assert_eq!(buf.capacity(), 64, "room was there: no reallocation");

        // A full Vec gets room first instead of reading 0 bytes (which would read as EOF).
        buf.shrink_to_fit();
        assert_eq!(buf.len(), buf.capacity());
        (&client).write_all(b"!").unwrap();
        assert_eq!(server.read_buf(&mut buf).unwrap(), 1);
        assert_eq!(buf, b"> hello!");

        drop(client);
        let len = buf.len();
        assert_eq!(server.read_buf(&mut buf).unwrap(), 0, "eof");
        buf.len() == len
    });
    assert!(result);
}
