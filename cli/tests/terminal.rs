//! A job run from an interactive terminal keeps the terminal: it can read
//! it (it is in the terminal's foreground process group), and it is still
//! stopped as a whole on a loss. Run through `script`, which gives the
//! command a pseudo-terminal.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::io::Write;
use std::process::{Child, Command, Stdio};

use common::*;

/// Kills `script` (and so its terminal's session) when a test fails.
struct Script(Child);

impl Drop for Script {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Runs `redmutex <args>` under `script`, in a pseudo-terminal.
fn in_terminal(s: &Setup, args: &str) -> Script {
    let inner = format!("{} {args}", env!("CARGO_BIN_EXE_redmutex"));
    let child = Command::new("script")
        .args(["-qec", &inner, "/dev/null"])
        .env("REDIS_URL", s.server.url())
        .env("OUT", s.file("out"))
        .env("READY", s.file("ready"))
        .env("PID", s.file("pid"))
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("the test needs script(1) from util-linux");
    Script(child)
}

#[test]
fn a_job_that_reads_the_terminal_keeps_working() {
    let s = setup("terminal");
    let job = "echo $$ > \"$PID\"; read line; echo \"got $line\" > \"$OUT\"";
    let mut script = in_terminal(&s, &format!("run ttykey -- sh -c '{job}'"));
    let mut input = script.0.stdin.take().unwrap();
    input.write_all(b"hello\n").unwrap();
    input.flush().unwrap();
    wait_for("the job read the terminal", || {
        std::fs::read_to_string(s.file("out")).is_ok_and(|o| o.trim() == "got hello")
    });
    drop(input);
    let status = finish_within(std::mem::replace(
        &mut script.0,
        Command::new("true").spawn().unwrap(),
    ));
    assert!(status.success(), "{status:?}");
}

/// In the terminal's foreground, the job is still stopped as a whole on a
/// loss, and the command exits 70.
#[test]
fn a_job_in_the_terminal_is_still_stopped_on_a_loss() {
    let s = setup("terminal-loss");
    let job = "echo $$ > \"$PID\"; sleep 1000 & echo started > \"$READY\"; read line";
    let mut script = in_terminal(
        &s,
        &format!("run --ttl 2s lostty -- sh -c '{job}'; echo $? > \"$OUT\""),
    );
    let input = script.0.stdin.take().unwrap();
    wait_for("the job started", || s.file("ready").exists());
    let leader = job_pid(&s);
    redis::cmd("DEL").arg("lostty").exec(&mut s.conn()).unwrap();
    wait_for("redmutex exited", || s.file("out").exists());
    assert_eq!(std::fs::read_to_string(s.file("out")).unwrap().trim(), "70");
    assert!(!alive(leader));
    drop(input);
}

/// Ctrl-Z in the terminal stops the job's group (it is the foreground
/// one); redmutex must not leave it stopped for good with the terminal and
/// the lock. Here the shell has no job control (`script` runs the command
/// as its session's leader, whose group is orphaned, so the suspension
/// cannot reach a shell): the job is resumed and goes on reading, as it
/// would without redmutex, where the kernel ignores Ctrl-Z for an orphaned
/// group.
#[test]
fn ctrl_z_in_the_terminal_does_not_leave_the_job_stopped() {
    let s = setup("terminal-ctrl-z");
    let job = "echo $$ > \"$PID\"; echo started > \"$READY\"; read line; \
               echo \"got $line\" > \"$OUT\"";
    let mut script = in_terminal(&s, &format!("run ctrlz -- sh -c '{job}'"));
    let mut input = script.0.stdin.take().unwrap();
    wait_for("the job started", || s.file("ready").exists());
    input.write_all(b"\x1a").unwrap();
    input.flush().unwrap();
    input.write_all(b"hello\n").unwrap();
    input.flush().unwrap();
    wait_for("the job read the terminal after Ctrl-Z", || {
        std::fs::read_to_string(s.file("out")).is_ok_and(|o| o.trim() == "got hello")
    });
    drop(input);
    let status = finish_within(std::mem::replace(
        &mut script.0,
        Command::new("true").spawn().unwrap(),
    ));
    assert!(status.success(), "{status:?}");
}

/// The state letter of process `pid` (R, S, T, Z...), if it exists.
fn state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(") ")?.1.chars().next()
}

/// The parent of process `pid`.
fn parent(pid: u32) -> u32 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let rest = stat.rsplit_once(") ").unwrap().1;
    rest.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// Started in the background of an interactive shell (`redmutex run ... &`),
/// a job that reads the terminal is stopped by it (SIGTTIN), as any
/// background job is. The shell must see that (redmutex stops too), and
/// `fg` must give the job the terminal and resume it; before, the job stayed
/// stopped for good with the lock while the shell showed redmutex running,
/// and `fg` brought back only redmutex.
#[test]
fn a_job_started_in_the_background_reads_the_terminal_after_fg() {
    let s = setup("terminal-bg");
    let mut shell = Command::new("script")
        .args(["-qec", "bash --norc --noprofile -i", "/dev/null"])
        .env("REDIS_URL", s.server.url())
        .env("OUT", s.file("out"))
        .env("READY", s.file("ready"))
        .env("PID", s.file("pid"))
        .env("PS1", "$ ")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("the test needs script(1) from util-linux and bash");
    let mut input = shell.stdin.take().unwrap();
    let script = Script(shell);
    let job = "echo $$ > \"$PID\"; echo started > \"$READY\"; read line; \
               echo \"got $line\" > \"$OUT\"";
    let line = format!(
        "{} run bgkey -- sh -c '{job}' &\n",
        env!("CARGO_BIN_EXE_redmutex")
    );
    input.write_all(line.as_bytes()).unwrap();
    input.flush().unwrap();
    wait_for("the job started", || s.file("ready").exists());
    let leader = job_pid(&s);
    let supervisor = parent(leader);
    wait_for(
        "redmutex stopped with its job, for the shell to see",
        || state(supervisor) == Some('T'),
    );
    // `fg` only once the shell has seen its job stop too (it learns of it
    // from its own SIGCHLD, which a loaded machine can delay past our
    // look at the process): bash's `fg` of a job it believes running sends
    // it no SIGCONT, and redmutex would stay stopped.
    input
        .write_all(b"until [ -n \"$(jobs -s)\" ]; do sleep 0.05; done; fg\n")
        .unwrap();
    input.flush().unwrap();
    wait_for("the job resumed", || {
        state(leader).is_some_and(|c| c != 'T')
    });
    input.write_all(b"hello\n").unwrap();
    input.flush().unwrap();
    wait_for("the job read the terminal after fg", || {
        std::fs::read_to_string(s.file("out")).is_ok_and(|o| o.trim() == "got hello")
    });
    input.write_all(b"exit\n").unwrap();
    drop(input);
    drop(script);
}
