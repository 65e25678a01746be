//! `weft-loadtest --addr 127.0.0.1:PORT --conns C --rounds R ...`: see the library docs.

fn main() {
    let config = match weft_loadtest::parse_args(std::env::args().skip(1)) {
        Ok(config) => config,
        Err(message) => {
            eprintln!("{message}");
            std::process::exit(2);
        }
    };
    let report = weft_loadtest::run_bounded(config, 32 * 1024).unwrap_or_else(|e| {
        eprintln!("{e}");
        std::process::exit(1);
    });
    println!("{}", report.text());
    println!("{}", report.json());
    if report.conns_failed > 0 || report.rtt_failed > 0 {
        std::process::exit(1);
    }
}
