//! Real protocol crates, unchanged, over weft sockets: TLS with `rustls` (`StreamOwned` over a
//! `weft::net::TcpStream` on both ends, a self-signed certificate made by `rcgen` in the test)
//! and WebSocket with `tungstenite`'s sync API. Client and server tasks share one runtime of 2
//! workers on 127.0.0.1, so a crate call that blocked its worker instead of parking the task
//! would stall the peers on that worker: the monitor must report no blocked worker, and a 5 ms
//! ticker task beside them must keep ticking.

mod common;

use std::io::{Read, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use weft::net::{TcpListener, TcpStream};

/// The longest gap the ticker may see. Its sleep is 5 ms; the bound is generous because the
/// two shared CPUs also run debug-built crypto, and a task that computes is not preempted: it
/// catches a worker blocked in a socket call (until the peer's data comes, which is never when
/// the peer waits on that same worker), not scheduling noise.
const TICKER_MAX_GAP: Duration = Duration::from_secs(2);

/// A task that sleeps 5 ms in a loop until `stop`, and returns its tick count and its longest
/// gap between two ticks.
fn ticker(stop: Arc<AtomicBool>) -> weft::JoinHandle<(u64, Duration)> {
    weft::spawn(move || {
        let mut ticks = 0;
        let mut longest = Duration::ZERO;
        let mut last = Instant::now();
        while !stop.load(Ordering::Relaxed) {
            weft::time::sleep(Duration::from_millis(5));
            let now = Instant::now();
            longest = longest.max(now - last);
            last = now;
            ticks += 1;
        }
        (ticks, longest)
    })
}

/// Stops the ticker and checks it kept ticking. Called in a task: the join parks it (the
/// test's watchdog bounds the wait).
fn check_ticker(stop: &AtomicBool, ticker: weft::JoinHandle<(u64, Duration)>) {
    stop.store(true, Ordering::Relaxed);
    let (ticks, longest) = ticker.join().unwrap();
    eprintln!("ticker: {ticks} ticks, longest gap {longest:?}");
    assert!(ticks > 0, "the ticker never ticked");
    assert!(
        longest < TICKER_MAX_GAP,
        "the ticker was starved for {longest:?}"
    );
}

/// The bytes client `client` sends in round `round`: `len` bytes no other (client, round) sends.
fn payload(client: u64, round: u64, len: usize) -> Vec<u8> {
    let mut state = client.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ round.wrapping_add(1);
    (0..len)
        .map(|_| {
            // xorshift64: cheap, and every byte depends on (client, round).
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect()
}

/// Serves `clients` connections on 127.0.0.1 in one runtime of 2 workers, each accepted
/// socket in its own task running `serve`, each client in its own task running `client` with
/// its number and a connected socket; joins them all, then checks that the ticker kept ticking
/// and that the monitor reported no blocked worker. `what` names the load in the watchdog's
/// message and in the printed time.
fn echo_load<S, C>(what: &'static str, clients: u64, serve: S, client: C)
where
    S: Fn(TcpStream) + Send + Sync + 'static,
    C: Fn(u64, TcpStream) + Send + Sync + 'static,
{
    common::prepare_descriptors();
    let _watchdog = common::watchdog(what, 60);
    let (rt, reports) = common::runtime_with_reports(2);
    let (serve, client) = (Arc::new(serve), Arc::new(client));
    let start = Instant::now();
    rt.block_on(move || {
        let stop = Arc::new(AtomicBool::new(false));
        let ticker = ticker(stop.clone());
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let acceptor = weft::spawn(move || {
            let servers: Vec<_> = (0..clients)
                .map(|_| {
                    let (socket, _) = listener.accept().unwrap();
                    let serve = serve.clone();
                    weft::spawn(move || serve(socket))
                })
                .collect();
            servers.into_iter().for_each(|s| s.join().unwrap());
        });
        let clients: Vec<_> = (0..clients)
            .map(|n| {
                let client = client.clone();
                weft::spawn(move || client(n, TcpStream::connect(addr).unwrap()))
            })
            .collect();
        clients.into_iter().for_each(|c| c.join().unwrap());
        acceptor.join().unwrap();
        check_ticker(&stop, ticker);
    });
    eprintln!("{what}: {clients} connections in {:?}", start.elapsed());
    common::assert_never_blocked(&reports);
}

mod tls {
    use std::sync::Arc;

    use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
    use rustls::{ClientConfig, ClientConnection, RootCertStore, ServerConfig, ServerConnection};

    /// A server and a client configuration that trusts the server's fresh self-signed
    /// certificate for "localhost", both on `ring`.
    pub fn configs() -> (Arc<ServerConfig>, Arc<ClientConfig>) {
        let certified = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
        let cert: CertificateDer<'static> = certified.cert.der().clone();
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(
            certified.signing_key.serialize_der(),
        ));
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let server = ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(vec![cert.clone()], key)
            .unwrap();
        let mut roots = RootCertStore::empty();
        roots.add(cert).unwrap();
        let client = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        (Arc::new(server), Arc::new(client))
    }

    pub fn server_connection(config: &Arc<ServerConfig>) -> ServerConnection {
        ServerConnection::new(config.clone()).unwrap()
    }

    pub fn client_connection(config: &Arc<ClientConfig>) -> ClientConnection {
        ClientConnection::new(config.clone(), ServerName::try_from("localhost").unwrap()).unwrap()
    }
}

const TLS_CLIENTS: u64 = 200;
const TLS_ROUNDS: u64 = 4;
const TLS_MESSAGE: usize = 8 << 10;

#[test]
fn rustls_streams_over_weft_sockets_echo_every_byte_without_blocking_a_worker() {
    let (server_config, client_config) = tls::configs();
    let echoed = Arc::new(AtomicU64::new(0));
    let server_echoed = echoed.clone();
    let serve = move |socket| {
        let mut tls = rustls::StreamOwned::new(tls::server_connection(&server_config), socket);
        let mut buf = vec![0; 16 << 10];
        loop {
            // Ok(0) is the client's close_notify: a clean end of the stream.
            let n = tls.read(&mut buf).unwrap();
            if n == 0 {
                break;
            }
            tls.write_all(&buf[..n]).unwrap();
            tls.flush().unwrap();
            server_echoed.fetch_add(n as u64, Ordering::Relaxed);
        }
    };
    let client = move |client, socket| {
        let mut tls = rustls::StreamOwned::new(tls::client_connection(&client_config), socket);
        let mut reply = vec![0; TLS_MESSAGE];
        for round in 0..TLS_ROUNDS {
            let message = payload(client, round, TLS_MESSAGE);
            tls.write_all(&message).unwrap();
            tls.flush().unwrap();
            tls.read_exact(&mut reply).unwrap();
            assert!(reply == message, "client {client} round {round}: bad echo");
        }
        assert_eq!(
            tls.conn.protocol_version(),
            Some(rustls::ProtocolVersion::TLSv1_3)
        );
        tls.conn.send_close_notify();
        tls.flush().unwrap();
    };
    echo_load("rustls echo", TLS_CLIENTS, serve, client);
    assert_eq!(
        echoed.load(Ordering::Relaxed),
        TLS_CLIENTS * TLS_ROUNDS * TLS_MESSAGE as u64
    );
}

const WS_CLIENTS: u64 = 500;
const WS_ROUNDS: u64 = 100;

/// Round `round` of client `client`: text on even rounds, binary on odd ones, of varied sizes
/// (past tungstenite's 126-byte and 64 KiB frame-length encodings in rounds 0 and 1).
fn ws_message(client: u64, round: u64) -> tungstenite::Message {
    let len = match round {
        0 => 70_000,
        1 => 200,
        _ => 1 + ((client * 31 + round * 7) % 125) as usize,
    };
    if round.is_multiple_of(2) {
        let text: String = payload(client, round, len)
            .into_iter()
            .map(|b| char::from(b'a' + b % 26))
            .collect();
        tungstenite::Message::text(text)
    } else {
        tungstenite::Message::binary(payload(client, round, len))
    }
}

#[test]
fn tungstenite_websockets_over_weft_sockets_echo_every_message_without_blocking_a_worker() {
    use tungstenite::{Error, Message};

    let echoed = Arc::new(AtomicU64::new(0));
    let server_echoed = echoed.clone();
    let serve = move |socket: TcpStream| {
        socket.set_nodelay(true).unwrap();
        let mut ws = tungstenite::accept(socket).unwrap();
        loop {
            match ws.read() {
                Ok(message @ (Message::Text(_) | Message::Binary(_))) => {
                    ws.send(message).unwrap();
                    server_echoed.fetch_add(1, Ordering::Relaxed);
                }
                // tungstenite answers the close itself; the next read says so.
                Ok(Message::Close(_)) => {}
                Ok(other) => panic!("unexpected message {other:?}"),
                Err(Error::ConnectionClosed) => break,
                Err(e) => panic!("server read: {e}"),
            }
        }
    };
    let client = |client, socket: TcpStream| {
        socket.set_nodelay(true).unwrap();
        let (mut ws, response) =
            tungstenite::client(format!("ws://localhost/echo/{client}"), socket).unwrap();
        assert_eq!(response.status(), 101);
        for round in 0..WS_ROUNDS {
            let message = ws_message(client, round);
            ws.send(message.clone()).unwrap();
            let reply = ws.read().unwrap();
            assert!(reply == message, "client {client} round {round}: bad echo");
        }
        ws.close(None).unwrap();
        loop {
            match ws.read() {
                Ok(Message::Close(_)) => {}
                Err(Error::ConnectionClosed) => break,
                other => panic!("client close: {other:?}"),
            }
        }
    };
    echo_load("tungstenite echo", WS_CLIENTS, serve, client);
    assert_eq!(echoed.load(Ordering::Relaxed), WS_CLIENTS * WS_ROUNDS);
}
