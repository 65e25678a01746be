//! A TCP echo server with cancellation and graceful shutdown on SIGINT or SIGTERM.
use std::io::{Read, Write};

use signal_hook::{consts::*, iterator::Signals};
use weft::context::Context;

fn main() -> std::io::Result<()> {
    let rt = weft::Runtime::new()?;
    let mut signals = Signals::new([SIGINT, SIGTERM])?;
    let addr = std::env::args().nth(1).unwrap_or("127.0.0.1:7000".into());
    let listener = weft::net::TcpListener::bind(addr)?;
    eprintln!("echo on {}", listener.local_addr()?);
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
    signals.forever().next(); // the first SIGINT or SIGTERM: stop accepting
    stop.cancel(); // the accept loop ends with Err(ContextError::Cancelled)
    assert!(server.join().unwrap().is_err());
    // Connections get 5 s to finish; then the rest are cancelled (destructors run).
    let report = rt.shutdown_timeout(std::time::Duration::from_secs(5));
    eprintln!("stopped; {report}"); // names the tasks it cancelled
    Ok(())
}
