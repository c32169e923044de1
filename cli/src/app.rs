//! The entry point: parses the command line and runs the command it names.

use std::process::ExitCode;

use clap::Parser;

use crate::args::{Cli, Command};
use crate::connect::locker;
use crate::exit::{usage, USAGE};
use crate::{operate, run, verbose, watch};

/// Runs the command line's command and returns its exit code.
pub fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let code = if e.use_stderr() { USAGE } else { 0 };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    match cli.command {
        Command::Holder(args) => operate::holder(&args),
        Command::List(args) => operate::list(&args),
        Command::Break(args) => operate::break_lock(&args),
        Command::Audit(args) => operate::audit(&args),
        Command::Leader(args) => operate::show_leader(&args),
        Command::Observe(args) => operate::observe(&args),
        Command::Watch {
            grace_ms,
            margin_ms,
            deadline_ms,
        } => watch::watch(grace_ms, margin_ms, deadline_ms),
        Command::Run(args) => {
            if args.verbose {
                verbose::start();
            }
            if let Err(message) = args.check() {
                return usage(&message);
            }
            let delay = args.lock_delay;
            let code = match locker(&args.server, Some(args.ttl), args.max_hold, delay) {
                Ok(locker) => run::run(&locker, &args),
                Err(code) => code,
            };
            verbose::flush();
            code
        }
    }
}
