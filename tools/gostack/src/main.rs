//! `weft-gostack` command line: argument parsing only; the work is in the library.

use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;
use weft_gostack::{analyze, binary, pprof, report, Error};

#[derive(Parser)]
#[command(
    name = "weft-gostack",
    version,
    about = "Profile-guided goroutine stack sizing for Go services"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Print every function's maximum frame size, read from the binary's pclntab.
    Frames {
        /// The Go executable.
        bin: PathBuf,
        /// Show only the N largest frames.
        #[arg(long)]
        top: Option<usize>,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Report the CPU spent growing goroutine stacks and recommend a starting stack size.
    Analyze {
        /// The Go executable the profile was taken from.
        #[arg(long)]
        binary: PathBuf,
        /// The CPU profile (pprof format, as written by runtime/pprof).
        #[arg(long)]
        profile: PathBuf,
        /// Percentage of growth samples the recommended size must cover.
        #[arg(long, default_value_t = 99.0)]
        coverage: f64,
        /// Runtime stack guard in bytes (928 on linux; 1728 for -race builds).
        #[arg(long, default_value_t = analyze::DEFAULT_GUARD)]
        guard: u32,
        /// Rows to show in the chains and stack-hogs tables.
        #[arg(long, default_value_t = 10)]
        top: usize,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
}

fn run(cli: Cli) -> Result<String, Error> {
    match cli.cmd {
        Cmd::Frames { bin, top, json } => {
            let b = binary::load(&bin)?;
            Ok(report::frames(&b, top, json))
        }
        Cmd::Analyze {
            binary: bin,
            profile,
            coverage,
            guard,
            top,
            json,
        } => {
            if !(coverage > 0.0 && coverage <= 100.0) {
                return Err(Error::new(
                    "--coverage",
                    format!("{coverage} is not a percentage in (0, 100]"),
                ));
            }
            let b = binary::load(&bin)?;
            let p = pprof::load(&profile)?;
            let opts = analyze::Options {
                coverage: coverage / 100.0,
                guard,
            };
            let a = analyze::analyze(&b, &p, &opts).map_err(|e| e.in_file(profile.display()))?;
            if let Some(w) = &a.build_id_note {
                eprintln!("gostack: {}: note: {w}", profile.display());
            }
            Ok(report::analysis(&a, top, json))
        }
    }
}

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(out) => {
            print!("{out}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{e}");
            ExitCode::FAILURE
        }
    }
}
