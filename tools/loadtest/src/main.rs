//! `weft-loadtest --addr 127.0.0.1:PORT --conns C --rounds R ...`: see the library docs.

fn main() {
    let config = match weft_loadtest::parse_args(std::env::args().skip(1)) {
        Ok(config) => config,
        Err(message) => {
            eprintln!("{message}");
            std::process::exit(2);
        }
    };
    weft_loadtest::prepare_fds(config.conns + 256);
    // A run must end: past every timeout the load can take, give up with an error.
    let limit = weft_loadtest::time_limit(&config);
    std::thread::spawn(move || {
        std::thread::sleep(limit);
        eprintln!("loadtest: the run did not end within {limit:?}; giving up");
        std::process::exit(3);
    });
    let runtime = weft::Runtime::builder()
        .stack_size(32 * 1024)
        .build()
        .unwrap_or_else(|e| {
            eprintln!("loadtest: cannot start the runtime: {e}");
            std::process::exit(1);
        });
    let report = runtime.block_on(move || weft_loadtest::run(&config));
    println!("{}", report.text());
    println!("{}", report.json());
    if report.conns_failed > 0 || report.rtt_failed > 0 {
        std::process::exit(1);
    }
}
