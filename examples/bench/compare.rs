//! `bench compare <git rev>`: this revision against another, same program,
//! same machine, same sitting.
//!
//! The other revision is checked out (detached) in a git worktree outside
//! the tree, under the system's temporary directory
//! (`redmutex-compare/<sha>`, kept for the next comparison; `git worktree
//! remove` it when done). Two small packages are written beside it, each a
//! `main` that includes this bench's `figures.rs` (see there) and depends
//! on one library revision by path, with this tree's `Cargo.lock`: so the
//! newest figures' code measures both, built alike (release). Both are
//! built into this tree's target directory (`target/release`), then
//! run one round each, alternately (new first in even rounds, old first in
//! odd ones), pinned (server on CPU 0, client on CPU 1), unpinned, or both
//! in turn, each round on a fresh `redis-server`. For each figure it
//! prints the median of each side, the ratio new/old of the medians, and
//! the run-to-run spread: the lowest and highest ratio of one round's new
//! to the same round's old, and each side's (max - min) / median. Last,
//! `INFO commandstats` per uncontended lock + unlock of each side (calls
//! and µs per command; each `redis.call` in a script counts as a command).
//!
//! ```text
//! cargo run --release --example bench -- compare c2eaaad
//! cargo run --release --example bench -- compare 7013b77 pinned rounds 7 quick
//! ```
//!
//! Options after the revision: `pinned`, `unpinned` or `both` (the
//! default), `rounds N` (5), `quick` (shorter runs), `only=<group>` (one
//! group of figures: `A`, `cpu`, `B`, `C` or `handover`; repeatable).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::figures::Res;

/// One side's figures, round by round: name -> values.
type Figures = BTreeMap<String, Vec<f64>>;
/// One side's commands per cycle, round by round: name -> (calls, µs).
type Commands = BTreeMap<String, Vec<(f64, f64)>>;

/// Runs the comparison `args` asks for (the arguments after `compare`).
pub fn compare(args: &[String]) -> Res<()> {
    let rev = args
        .first()
        .ok_or("compare: which git revision? (bench compare <rev>)")?;
    let has = |word: &str| args.iter().any(|a| a == word);
    let rounds: usize = match args.iter().position(|a| a == "rounds") {
        Some(i) => args.get(i + 1).ok_or("rounds: how many?")?.parse()?,
        None => 5,
    };
    let modes: &[&str] = if has("pinned") {
        &["pinned"]
    } else if has("unpinned") {
        &["unpinned"]
    } else {
        &["pinned", "unpinned"]
    };
    // Passed on to each round: `quick`, `only=<group>`.
    let extra: Vec<String> = args
        .iter()
        .filter(|a| *a == "quick" || a.starts_with("only="))
        .cloned()
        .collect();
    let tree = Path::new(env!("CARGO_MANIFEST_DIR"));
    let sha = git(
        tree,
        &["rev-parse", "--verify", &format!("{rev}^{{commit}}")],
    )?;
    let head = git(tree, &["rev-parse", "HEAD"])?;
    let dirty = !git(tree, &["status", "--porcelain", "--untracked-files=no"])?.is_empty();
    let short = sha.get(..10).unwrap_or(&sha);
    let base = std::env::temp_dir().join("redmutex-compare");
    let old_tree = base.join(short);
    if !old_tree.join("Cargo.toml").exists() {
        std::fs::create_dir_all(&base)?;
        let path = old_tree
            .to_str()
            .ok_or("a temporary directory that is not UTF-8")?;
        git(tree, &["worktree", "add", "--detach", path, &sha])?;
    }
    // This tree's own target directory: the dependencies built for it are
    // reused (each library revision is built apart, by its path).
    let target =
        std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| tree.join("target"), PathBuf::from);
    let new_bin = package(&base, "new", tree, tree, &target)?;
    let old_bin = package(&base, &format!("old-{short}"), &old_tree, tree, &target)?;
    let dirty = if dirty {
        " with uncommitted changes"
    } else {
        ""
    };
    println!(
        "bench compare: new = this tree ({}{dirty}), old = {rev} ({short}); {rounds} rounds each, \
         alternately; load average before: {}",
        head.get(..10).unwrap_or(&head),
        load()
    );
    for mode in modes {
        let mut new = (Figures::new(), Commands::new());
        let mut old = (Figures::new(), Commands::new());
        for round in 0..rounds {
            let sides = [(&new_bin, &mut new), (&old_bin, &mut old)];
            let order: Vec<_> = if round % 2 == 0 {
                sides.into_iter().collect()
            } else {
                sides.into_iter().rev().collect()
            };
            for (bin, into) in order {
                // A round that fails (a call timed out on a machine loaded
                // by others) is run once more before the comparison gives up.
                if let Err(e) = run_round(bin, mode, &extra, into) {
                    eprintln!("  {mode}: a round failed, run again: {e}");
                    run_round(bin, mode, &extra, into)?;
                }
            }
            eprintln!("  {mode}: round {} of {rounds} done", round + 1);
        }
        print_table(mode, rounds, &new.0, &old.0);
        print_commands(&new.1, &old.1);
    }
    println!("load average after: {}", load());
    Ok(())
}

/// `git -C dir args`, its output trimmed.
fn git(dir: &Path, args: &[&str]) -> Res<String> {
    let out = Command::new("git").arg("-C").arg(dir).args(args).output()?;
    if !out.status.success() {
        return Err(format!(
            "git {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )
        .into());
    }
    Ok(String::from_utf8(out.stdout)?.trim().to_owned())
}

/// Writes (under `base`) and builds the package `redmutex-bench-<label>`:
/// this tree's `figures.rs` over the library at `lib`, this tree's
/// testkit, and this tree's `Cargo.lock`. Returns its program's path.
fn package(base: &Path, label: &str, lib: &Path, tree: &Path, target: &Path) -> Res<PathBuf> {
    let name = format!("redmutex-bench-{label}");
    let dir = base.join(&name);
    std::fs::create_dir_all(&dir)?;
    let path = |p: &Path| -> Res<String> {
        Ok(p.canonicalize()?
            .to_str()
            .ok_or("a path that is not UTF-8")?
            .replace('\\', "/"))
    };
    let manifest = format!(
        r#"# Written by `bench compare`: this tree's figures over one library revision.
[package]
name = "{name}"
version = "0.0.0"
edition = "2021"
publish = false

[[bin]]
name = "{name}"
path = "main.rs"

[dependencies]
redmutex = {{ path = "{lib}" }}
redmutex-testkit = {{ path = "{tree}/testkit" }}
redis = {{ version = "1.8", default-features = false, features = ["script", "r2d2"] }}
r2d2 = "0.8.10"
nix = {{ version = "0.30", default-features = false, features = ["sched"] }}

[workspace]
"#,
        lib = path(lib)?,
        tree = path(tree)?,
    );
    let main = format!(
        "//! Written by `bench compare`.\n\
         #[path = \"{}/examples/bench/figures.rs\"]\n\
         mod figures;\n\n\
         fn main() -> figures::Res<()> {{\n    figures::child_main()\n}}\n",
        path(tree)?
    );
    std::fs::write(dir.join("Cargo.toml"), manifest)?;
    std::fs::write(dir.join("main.rs"), main)?;
    std::fs::copy(tree.join("Cargo.lock"), dir.join("Cargo.lock"))?;
    eprintln!("building {name} (release)...");
    let status = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args(["build", "--release", "--quiet", "--manifest-path"])
        .arg(dir.join("Cargo.toml"))
        .env("CARGO_TARGET_DIR", target)
        .status()?;
    if !status.success() {
        return Err(format!("building {name} failed").into());
    }
    Ok(target.join("release").join(name))
}

/// Runs one round of `bin` (`mode`: `pinned` or `unpinned`) and adds its
/// figures and commands to `into`.
fn run_round(bin: &Path, mode: &str, extra: &[String], into: &mut (Figures, Commands)) -> Res<()> {
    let mut cmd = Command::new(bin);
    cmd.arg(mode).args(extra);
    let out = cmd.output()?;
    if !out.status.success() {
        return Err(format!(
            "{} {mode} failed: {}",
            bin.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        )
        .into());
    }
    for line in String::from_utf8(out.stdout)?.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["figure", name, value] => {
                into.0
                    .entry((*name).to_owned())
                    .or_default()
                    .push(value.parse()?);
            }
            ["cmd", name, calls, usec] => {
                into.1
                    .entry((*name).to_owned())
                    .or_default()
                    .push((calls.parse()?, usec.parse()?));
            }
            _ => {}
        }
    }
    Ok(())
}

fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v.get(n / 2).copied().unwrap_or(f64::NAN),
        n => {
            let (a, b) = (v.get(n / 2 - 1), v.get(n / 2));
            a.zip(b).map_or(f64::NAN, |(a, b)| (a + b) / 2.0)
        }
    }
}

/// (max - min) / median of `values`.
fn spread(values: &[f64]) -> f64 {
    let max = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let min = values.iter().copied().fold(f64::INFINITY, f64::min);
    (max - min) / median(values)
}

fn print_table(mode: &str, rounds: usize, new: &Figures, old: &Figures) {
    println!("\n{mode}, {rounds} rounds each (medians; ratio new/old; per-round ratio range; spread (max-min)/median):");
    println!(
        "  {:<24} {:>11} {:>11} {:>8}  {:>15}  {:>7} {:>7}",
        "figure", "old", "new", "new/old", "round ratios", "old ±", "new ±"
    );
    for (name, n) in new {
        let Some(o) = old.get(name) else { continue };
        let ratios: Vec<f64> = n.iter().zip(o).map(|(n, o)| n / o).collect();
        let lo = ratios.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = ratios.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        println!(
            "  {name:<24} {:>11.2} {:>11.2} {:>8.3}  {:>6.3} – {:<6.3}  {:>6.1}% {:>6.1}%",
            median(o),
            median(n),
            median(n) / median(o),
            lo,
            hi,
            100.0 * spread(o),
            100.0 * spread(n)
        );
    }
}

fn print_commands(new: &Commands, old: &Commands) {
    println!("  INFO commandstats per uncontended lock + unlock (medians: calls, µs), old -> new:");
    let names: std::collections::BTreeSet<&String> = new.keys().chain(old.keys()).collect();
    let side = |c: &Commands, name: &str| -> (f64, f64) {
        c.get(name).map_or((0.0, 0.0), |v| {
            let calls: Vec<f64> = v.iter().map(|x| x.0).collect();
            let usec: Vec<f64> = v.iter().map(|x| x.1).collect();
            (median(&calls), median(&usec))
        })
    };
    let (mut calls_old, mut calls_new) = (0.0, 0.0);
    for name in names {
        let (o, n) = (side(old, name), side(new, name));
        calls_old += o.0;
        calls_new += n.0;
        println!(
            "    {name:<12} {:>5.2} calls {:>6.2} µs  ->  {:>5.2} calls {:>6.2} µs",
            o.0, o.1, n.0, n.1
        );
    }
    println!(
        "    all: {calls_old:.2} -> {calls_new:.2} calls (an evalsha's µs include its calls')"
    );
}

/// The 1-minute load average, as the machine's load for the record.
fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().map(str::to_owned))
        .unwrap_or_else(|| "?".into())
}
