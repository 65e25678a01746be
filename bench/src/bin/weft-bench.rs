//! `weft-bench`: see `weft_bench::cli` (the command line is parsed there).

use clap::Parser;

fn main() -> std::process::ExitCode {
    match weft_bench::cli::main(weft_bench::cli::Cli::parse()) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("weft-bench: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
