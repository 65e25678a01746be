//! A third-party synchronous crate, unchanged, over weft sockets: an HTTP/1.1 exchange parsed
//! with `httparse` behind a `std::io::BufReader`.

use std::io::{BufRead, BufReader, Read, Write};

use weft::net::{TcpListener, TcpStream};

/// Reads one message head (up to the blank line) through the BufReader.
fn read_head<R: BufRead>(reader: &mut R) -> Vec<u8> {
    let mut head = Vec::new();
    loop {
        let n = reader.read_until(b'\n', &mut head).unwrap();
        assert!(n > 0, "eof in head");
        if head.ends_with(b"\r\n\r\n") {
            return head;
        }
    }
}

fn serve(stream: TcpStream) {
    let mut reader = BufReader::new(&stream);
    loop {
        let mut head = Vec::new();
        if reader.read_until(b'\n', &mut head).unwrap() == 0 {
            return; // keep-alive connection closed
        }
        while !head.ends_with(b"\r\n\r\n") {
            reader.read_until(b'\n', &mut head).unwrap();
        }
        let mut headers = [httparse::EMPTY_HEADER; 16];
        let mut req = httparse::Request::new(&mut headers);
        assert!(req.parse(&head).unwrap().is_complete());
        let length: usize = req
            .headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case("content-length"))
            .map_or(0, |h| {
                std::str::from_utf8(h.value).unwrap().parse().unwrap()
            });
        let mut body = vec![0; length];
        reader.read_exact(&mut body).unwrap();
        let reply = format!(
            "{} {} -> {}",
            req.method.unwrap(),
            req.path.unwrap(),
            String::from_utf8(body).unwrap()
        );
        write!(
            &stream,
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\r\n{reply}",
            reply.len()
        )
        .unwrap();
    }
}

#[test]
fn httparse_exchange_runs_unchanged_over_weft_streams() {
    let rt = weft::Runtime::builder().workers(2).build().unwrap();
    rt.block_on(|| {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let server = weft::spawn(move || {
            let (stream, _) = listener.accept().unwrap();
            // `write!` sends each piece of the format in its own write: no Nagle delays.
            stream.set_nodelay(true).unwrap();
            serve(stream);
        });
        let stream = TcpStream::connect(addr).unwrap();
        stream.set_nodelay(true).unwrap();
        let mut reader = BufReader::new(&stream);
        for i in 0..20 {
            let body = format!("hello {i}");
            write!(
                &stream,
                "POST /echo/{i} HTTP/1.1\r\nHost: localhost\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            )
            .unwrap();
            let head = read_head(&mut reader);
            let mut headers = [httparse::EMPTY_HEADER; 16];
            let mut resp = httparse::Response::new(&mut headers);
            assert!(resp.parse(&head).unwrap().is_complete());
            assert_eq!(resp.code, Some(200));
            let length: usize = resp
                .headers
                .iter()
                .find(|h| h.name.eq_ignore_ascii_case("content-length"))
                .map(|h| std::str::from_utf8(h.value).unwrap().parse().unwrap())
                .unwrap();
            let mut text = vec![0; length];
            reader.read_exact(&mut text).unwrap();
            assert_eq!(
                String::from_utf8(text).unwrap(),
                format!("POST /echo/{i} -> hello {i}")
            );
        }
        drop(reader);
        drop(stream);
        server.join().unwrap();
    });
}
