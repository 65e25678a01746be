//! A TCP echo server with cancellation and graceful shutdown: Enter stops it.
use std::io::{Read, Write};
use std::time::Duration;

use weft::context::Context;

fn main() -> std::io::Result<()> {
    let rt = weft::Runtime::new()?;
    let listener = weft::net::TcpListener::bind("127.0.0.1:7000")?;
    let stop = Context::new();
    let accepting = stop.clone();
    // Bound to `stop`: its `cancel()` ends the parked `accept` and the loop.
    let server = rt.spawn(move || {
        accepting.bind(|| -> std::io::Result<()> {
            loop {
                let (mut conn, _) = listener.accept()?;
                // Not bound: a connection in flight goes on until it ends or the grace ends.
                weft::spawn(move || {
                    let mut buf = [0u8; 4096];
                    while let Ok(n @ 1..) = conn.read(&mut buf) {
                        if conn.write_all(&buf[..n]).is_err() {
                            break;
                        }
                    }
                });
            }
        })
    });
    eprintln!("echo on 127.0.0.1:7000; press Enter to stop");
    std::io::stdin().read_line(&mut String::new())?; // or a SIGTERM handler
    stop.cancel(); // stop accepting
    let accepted = server.join().unwrap(); // Err(ContextError::Cancelled)
    assert!(accepted.is_err());
    // Connections get 5 s to finish; then the rest are cancelled (destructors run).
    let clean = rt.shutdown_timeout(Duration::from_secs(5));
    eprintln!("stopped; every connection finished in time: {clean}");
    Ok(())
}
