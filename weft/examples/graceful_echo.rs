// A TCP echo server that stops on SIGINT or SIGTERM: no new connections, 5 s for the open ones.
use std::time::Duration;
use weft::context::Context;
use weft::signal::{Signals, SIGINT, SIGTERM};

fn main() -> std::io::Result<()> {
    let rt = weft::Runtime::new()?;
    let signals = Signals::new(&[SIGINT, SIGTERM])?; // from now on they queue here
    let addr = std::env::args().nth(1).unwrap_or("127.0.0.1:7000".into());
    let listener = weft::net::TcpListener::bind(addr)?;
    eprintln!("echo on {}", listener.local_addr()?);
    let stop = Context::new();
    let accepting = stop.clone();
    rt.spawn(move || {
        // Bound to `stop`: its cancel() ends the parked accept, and the loop.
        accepting.bind(|| -> std::io::Result<()> {
            loop {
                let (conn, _) = listener.accept()?;
                // Not bound: a connection goes on until it ends or the grace period does.
                weft::spawn(move || std::io::copy(&mut &conn, &mut &conn));
            }
        })
    });
    signals.recv(); // the first SIGINT or SIGTERM
    stop.cancel(); // stop accepting
    let report = rt.shutdown_timeout(Duration::from_secs(5)); // then cancel what is left
    eprintln!("stopped; {report}"); // it names each task it cancelled
    Ok(())
}
