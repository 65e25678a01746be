//! `weft-gostack` command line: argument parsing only; the work is in the library.

use clap::{Parser, Subcommand};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use weft_gostack::{analyze, apply, binary, pprof, report, Error};

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
    /// Write a starting stack size into a copy of a linux Go executable (amd64, arm64).
    ///
    /// The copy's goroutines taken from the runtime's free list start with SIZE bytes of
    /// stack instead of 2 KiB. Run it with GODEBUG=adaptivestackstart=0,gcshrinkstackoff=1
    /// (printed, merged with your GODEBUG), or pass --no-adaptive so that the GC never
    /// recomputes the size.
    Apply {
        /// The Go executable (never modified).
        #[arg(long)]
        binary: Option<PathBuf>,
        /// The starting stack size: a power of two from 2KiB to 1GiB (32768, 32KiB, 1MiB).
        #[arg(long)]
        size: Option<String>,
        /// Take the size `analyze` recommends for this CPU profile of the binary.
        #[arg(long, conflicts_with = "size")]
        from_profile: Option<PathBuf>,
        /// With --from-profile: percentage of growth samples the size must cover.
        #[arg(long, default_value_t = 99.0)]
        coverage: f64,
        /// The new file to write (never the input, under any name).
        #[arg(short, long)]
        output: Option<PathBuf>,
        /// Also make runtime.gcComputeStartingStackSize return at once, so the size holds
        /// without GODEBUG=adaptivestackstart=0 (the starting-size metric stays fixed).
        #[arg(long)]
        no_adaptive: bool,
        /// The GODEBUG the service runs with, to merge into the printed one (default: this
        /// environment's GODEBUG).
        #[arg(long)]
        godebug: Option<String>,
        /// Print the rebuild route instead of patching: a Go file and the -ldflags (with
        /// the module's default GODEBUG, from --binary's build info or --module).
        #[arg(long)]
        print_build_flags: bool,
        /// With --print-build-flags: the module directory whose default GODEBUG `go list`
        /// reports.
        #[arg(long)]
        module: Option<PathBuf>,
        /// With --module: the go command to run.
        #[arg(long, default_value = "go")]
        go: PathBuf,
    },
    /// Read back a Go executable's starting stack size and whether the GC recomputes it.
    Verify {
        /// The Go executable.
        #[arg(long)]
        binary: PathBuf,
        /// The GODEBUG the service runs with, to merge into the printed one (default: this
        /// environment's GODEBUG).
        #[arg(long)]
        godebug: Option<String>,
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
            check_coverage(coverage)?;
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
        Cmd::Apply {
            binary,
            size,
            from_profile,
            coverage,
            output,
            no_adaptive,
            godebug,
            print_build_flags,
            module,
            go,
        } => {
            let size = Size {
                size,
                from_profile,
                coverage,
            };
            if print_build_flags {
                if output.is_some() || no_adaptive {
                    return Err(Error::new(
                        "--print-build-flags",
                        "prints the rebuild route and writes nothing: drop -o and --no-adaptive",
                    ));
                }
                return build_flags(binary.as_deref(), module.as_deref(), &go, &size);
            }
            let binary = binary.ok_or_else(|| {
                Error::new(
                    "--binary",
                    "apply needs the Go executable to copy (--binary APP)",
                )
            })?;
            let output = output.ok_or_else(|| {
                Error::new(
                    binary.display(),
                    "no output file: apply writes a new file (-o APP.sized), never in place",
                )
            })?;
            apply::check_output(&binary, &output)?;
            let data = read(&binary)?;
            let (size, from) = size.resolve(&binary)?;
            let applied =
                apply::apply(&data, size, no_adaptive).map_err(|p| p.in_file(binary.display()))?;
            apply::write_new(&binary, &output, &applied.bytes)?;
            Ok(report::applied(
                &applied,
                &output.display().to_string(),
                &existing_godebug(godebug),
                &from,
            ))
        }
        Cmd::Verify {
            binary,
            godebug,
            json,
        } => {
            let data = read(&binary)?;
            let i = apply::inspect(&data).map_err(|p| p.in_file(binary.display()))?;
            let program = binary.display().to_string();
            let program = if program.contains('/') {
                program
            } else {
                format!("./{program}")
            };
            Ok(report::verified(
                &i,
                &existing_godebug(godebug),
                &program,
                json,
            ))
        }
    }
}

/// Where `apply`'s size comes from: `--size`, or the recommendation for `--from-profile`.
struct Size {
    size: Option<String>,
    from_profile: Option<PathBuf>,
    coverage: f64,
}

impl Size {
    /// The size and a phrase saying where it came from.
    fn resolve(&self, binary: &Path) -> Result<(u64, String), Error> {
        match (&self.size, &self.from_profile) {
            (Some(s), _) => {
                let n = apply::parse_size(s).map_err(|e| Error::new(binary.display(), e))?;
                Ok((n, format!("--size {s}")))
            }
            (None, Some(profile)) => {
                check_coverage(self.coverage)?;
                let b = binary::load(binary)?;
                let p = pprof::load(profile)?;
                let opts = analyze::Options {
                    coverage: self.coverage / 100.0,
                    guard: analyze::DEFAULT_GUARD,
                };
                let a =
                    analyze::analyze(&b, &p, &opts).map_err(|e| e.in_file(profile.display()))?;
                let r = a.recommendation.ok_or_else(|| {
                    Error::new(
                        profile.display(),
                        "no sample reached stack growth: there is no starting stack to recommend",
                    )
                })?;
                if r.size <= analyze::MIN_STACK {
                    return Err(Error::new(
                        profile.display(),
                        format!(
                            "the recommended starting stack is {} B, the runtime's default: nothing to apply",
                            r.size
                        ),
                    ));
                }
                Ok((
                    r.size,
                    format!(
                        "analyze's recommendation for {}: covers {:.1}% of growth samples",
                        profile.display(),
                        r.coverage * 100.0
                    ),
                ))
            }
            (None, None) => Err(Error::new(
                binary.display(),
                "no size: give --size SIZE (32KiB) or --from-profile cpu.pprof",
            )),
        }
    }
}

/// `apply --print-build-flags`.
fn build_flags(
    binary: Option<&Path>,
    module: Option<&Path>,
    go: &Path,
    size: &Size,
) -> Result<String, Error> {
    let (default_godebug, version, source) = match (module, binary) {
        (Some(dir), _) => {
            let list = go_output(go, dir, &["list", "-f", "{{.DefaultGODEBUG}}", "."])?;
            let version = go_output(go, dir, &["env", "GOVERSION"])?;
            (list, version, format!("`go list` in {}", dir.display()))
        }
        (None, Some(bin)) => {
            let data = read(bin)?;
            let info = weft_gostack::buildinfo::BuildInfo::of_executable(&data, None)
                .ok_or_else(|| Error::new(bin.display(), "no Go build info: not a Go executable"))?;
            (
                info.setting("DefaultGODEBUG").unwrap_or("").to_string(),
                info.version,
                format!("the build info of {}", bin.display()),
            )
        }
        (None, None) => {
            return Err(Error::new(
                "--print-build-flags",
                "needs the module's default GODEBUG: give --binary APP (its build info) or --module DIR",
            ))
        }
    };
    let label = binary.map_or_else(|| "--size".to_string(), |b| b.display().to_string());
    let (n, _) = size.resolve(binary.unwrap_or(Path::new(&label)))?;
    apply::check_size(n).map_err(|p| p.in_file(&label))?;
    Ok(report::build_flags(n, &default_godebug, &version, &source))
}

fn go_output(go: &Path, dir: &Path, args: &[&str]) -> Result<String, Error> {
    let o = std::process::Command::new(go)
        .current_dir(dir)
        .args(args)
        .output()
        .map_err(|e| Error::new(go.display(), e.to_string()))?;
    if !o.status.success() {
        return Err(Error::new(
            dir.display(),
            format!(
                "{} {} failed: {}",
                go.display(),
                args.join(" "),
                String::from_utf8_lossy(&o.stderr).trim()
            ),
        ));
    }
    Ok(String::from_utf8_lossy(&o.stdout).trim().to_string())
}

fn existing_godebug(arg: Option<String>) -> String {
    arg.or_else(|| std::env::var("GODEBUG").ok())
        .unwrap_or_default()
}

fn read(path: &Path) -> Result<Vec<u8>, Error> {
    std::fs::read(path).map_err(|e| Error::new(path.display(), e.to_string()))
}

fn check_coverage(coverage: f64) -> Result<(), Error> {
    if coverage > 0.0 && coverage <= 100.0 {
        Ok(())
    } else {
        Err(Error::new(
            "--coverage",
            format!("{coverage} is not a percentage in (0, 100]"),
        ))
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
