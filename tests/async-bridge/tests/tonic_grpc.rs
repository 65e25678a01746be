//! tonic gRPC both ways, with hand-written prost messages and tonic's `Grpc` + `ProstCodec` (no
//! `protoc`, no build script):
//! - a tonic server on tokio, called by 1,000 weft tasks through `weft::tokio::block_on`, with
//!   a 5 ms ticker on their weft runtime staying on time;
//! - a tonic server whose handler hands each call to a weft task and awaits its `JoinHandle`,
//!   called by tokio tasks.

use std::convert::Infallible;
use std::time::{Duration, Instant};

use tonic::codec::ProstCodec;
use tonic::codegen::http::uri::PathAndQuery;
use tonic::codegen::{http, BoxFuture, Context, Poll, Service};
use weft_async_tests::Ticker;

#[derive(Clone, PartialEq, prost::Message)]
struct SayRequest {
    #[prost(string, tag = "1")]
    name: String,
    #[prost(uint32, tag = "2")]
    n: u32,
}

#[derive(Clone, PartialEq, prost::Message)]
struct SayReply {
    #[prost(string, tag = "1")]
    message: String,
}

const PATH: &str = "/weft.test.Greeter/Say";

/// The reply the server computes: on tokio itself, or on a weft task (`offload`).
fn reply(req: &SayRequest) -> SayReply {
    SayReply {
        message: format!("hello {} #{}", req.name, req.n),
    }
}

/// The gRPC server: one unary method at [`PATH`], answered inline or by a weft task.
#[derive(Clone)]
struct Greeter {
    offload: Option<weft::Handle>,
}

/// The method as tonic's `UnaryService`.
#[derive(Clone)]
struct Say {
    offload: Option<weft::Handle>,
}

impl Service<tonic::Request<SayRequest>> for Say {
    type Response = tonic::Response<SayReply>;
    type Error = tonic::Status;
    type Future = BoxFuture<Self::Response, tonic::Status>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), tonic::Status>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: tonic::Request<SayRequest>) -> Self::Future {
        let offload = self.offload.clone();
        Box::pin(async move {
            let req = request.into_inner();
            let reply = match offload {
                // Blocking code on a weft task, awaited without blocking tokio's worker.
                Some(weft) => weft
                    .spawn(move || {
                        weft::time::sleep(Duration::from_millis(1)); // stands for blocking work
                        reply(&req)
                    })
                    .await
                    .map_err(|_| tonic::Status::internal("the weft task failed"))?,
                None => reply(&req),
            };
            Ok(tonic::Response::new(reply))
        })
    }
}

impl Service<http::Request<tonic::body::Body>> for Greeter {
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = BoxFuture<Self::Response, Infallible>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<tonic::body::Body>) -> Self::Future {
        let say = Say {
            offload: self.offload.clone(),
        };
        Box::pin(async move {
            if req.uri().path() != PATH {
                return Ok(tonic::Status::unimplemented("no such method").into_http());
            }
            let mut grpc = tonic::server::Grpc::new(ProstCodec::<SayReply, SayRequest>::default());
            Ok(grpc.unary(say, req).await)
        })
    }
}

/// Starts the server on `servers`; returns its address.
fn serve(servers: &tokio::runtime::Runtime, greeter: Greeter) -> std::net::SocketAddr {
    let listener = servers
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let addr = listener.local_addr().unwrap();
    servers.spawn(async move {
        tonic::transport::Server::builder()
            .serve_with_incoming(
                greeter,
                tonic::transport::server::TcpIncoming::from(listener),
            )
            .await
            .unwrap();
    });
    addr
}

/// One call through a client made on `channel`.
async fn say(
    channel: tonic::transport::Channel,
    name: &str,
    n: u32,
) -> Result<String, tonic::Status> {
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready()
        .await
        .map_err(|e| tonic::Status::unavailable(e.to_string()))?;
    let request = tonic::Request::new(SayRequest {
        name: name.to_string(),
        n,
    });
    let codec = ProstCodec::<SayRequest, SayReply>::default();
    let reply = grpc
        .unary(request, PathAndQuery::from_static(PATH), codec)
        .await?;
    Ok(reply.into_inner().message)
}

async fn connect(addr: std::net::SocketAddr) -> tonic::transport::Channel {
    tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .expect("cannot connect to the gRPC server")
}

const TASKS: usize = 1000;
const CALLS: u32 = 3;

#[test]
fn weft_tasks_call_a_tonic_server_on_tokio() {
    let _alone = weft_async_tests::one_at_a_time();
    let servers = weft_async_tests::server_runtime(1);
    let addr = serve(&servers, Greeter { offload: None });

    let rt = weft::Runtime::builder().workers(2).build().unwrap();
    let ticker = Ticker::start(&rt.handle());
    let start = Instant::now();
    let calls = rt.block_on(move || {
        // One HTTP/2 connection, multiplexed by all tasks (a Channel is cheap to clone).
        let channel = weft::tokio::block_on(connect(addr));
        let tasks: Vec<_> = (0..TASKS)
            .map(|i| {
                let channel = channel.clone();
                weft::spawn(move || {
                    // Starts spread over a second, a pause after each call: load well below
                    // the 2 CPUs, so a late tick means a blocked worker.
                    weft::time::sleep(Duration::from_millis(i as u64 % 1000));
                    for n in 0..CALLS {
                        let name = format!("task {i}");
                        let message = weft::tokio::block_on(say(channel.clone(), &name, n))
                            .expect("the call failed");
                        assert_eq!(message, format!("hello task {i} #{n}"));
                        weft::time::sleep(Duration::from_millis(100));
                    }
                    CALLS as usize
                })
            })
            .collect();
        tasks.into_iter().map(|t| t.join().unwrap()).sum::<usize>()
    });
    let lateness = ticker.stop();
    assert_eq!(calls, TASKS * CALLS as usize);
    println!(
        "tonic: {calls} calls from {TASKS} weft tasks in {:?}",
        start.elapsed()
    );
    lateness.check("tonic, weft clients");
}

#[test]
fn tokio_clients_call_a_tonic_server_whose_handler_runs_on_weft_tasks() {
    let _alone = weft_async_tests::one_at_a_time();
    let rt = weft::Runtime::builder().workers(2).build().unwrap();
    let servers = weft_async_tests::server_runtime(2);
    let addr = serve(
        &servers,
        Greeter {
            offload: Some(rt.handle()),
        },
    );
    let ticker = Ticker::start(&rt.handle());
    let start = Instant::now();
    let clients = weft_async_tests::server_runtime(1);
    let calls = clients.block_on(async move {
        let channel = connect(addr).await;
        let mut joins = Vec::new();
        for i in 0..TASKS {
            let channel = channel.clone();
            joins.push(tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(i as u64 % 1000)).await;
                for n in 0..CALLS {
                    let message = say(channel.clone(), &format!("tokio {i}"), n)
                        .await
                        .unwrap();
                    assert_eq!(message, format!("hello tokio {i} #{n}"));
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                CALLS as usize
            }));
        }
        let mut calls = 0;
        for j in joins {
            calls += j.await.unwrap();
        }
        calls
    });
    let lateness = ticker.stop();
    assert_eq!(calls, TASKS * CALLS as usize);
    println!(
        "tonic: {calls} calls handled by weft tasks in {:?}",
        start.elapsed()
    );
    lateness.check("tonic, weft handlers");
}
