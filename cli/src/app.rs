//! The entry point: parses the command line and runs the command it names.

use std::process::ExitCode;

use clap::parser::ValueSource;
use clap::{CommandFactory, FromArgMatches};

use crate::args::{Cli, Command};
use crate::connect::locker;
use crate::exit::{usage, USAGE};
use crate::{operate, run, verbose, watch};

/// Runs the command line's command and returns its exit code.
pub fn main() -> ExitCode {
    let parsed = Cli::command()
        .try_get_matches()
        .and_then(|matches| Ok((Cli::from_arg_matches(&matches)?, matches)));
    let (mut cli, matches) = match parsed {
        Ok(parsed) => parsed,
        Err(e) => {
            let code = if e.use_stderr() { USAGE } else { 0 };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    // Messages say where the URL came from (it may be the environment's).
    if let (Some(server), Some((_, sub))) = (cli.command.server_mut(), matches.subcommand()) {
        server.from_env = sub.value_source("url") == Some(ValueSource::EnvVariable);
    }
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
