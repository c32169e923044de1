//! The default metadata: the host's name, looked up once per process, and
//! the process id.

/// `<hostname>:<pid>`, with "unknown-host" where no name can be read.
/// The host name is looked up once per process (see [`host_name`]).
pub(super) fn default_metadata() -> String {
    static HOST: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let host = HOST.get_or_init(|| {
        host_name(
            &|path| std::fs::read_to_string(path).ok(),
            &|var| std::env::var(var).ok(),
            &uname_n,
        )
        .unwrap_or_else(|| "unknown-host".to_owned())
    });
    format!("{host}:{}", std::process::id())
}

/// The host's name, from the first of these that gives one: Linux's
/// `/proc/sys/kernel/hostname`, then `/etc/hostname` (Linux without
/// `/proc`), then the `HOSTNAME` variable (containers set it) and
/// `COMPUTERNAME` (Windows), then `uname -n` (macOS, the BSDs, any other
/// Unix). No new dependency and no `unsafe`: a `gethostname(2)` binding
/// would need one or the other. `uname -n` runs once per process, only where
/// nothing before answered.
fn host_name(
    read_file: &dyn Fn(&str) -> Option<String>,
    var: &dyn Fn(&str) -> Option<String>,
    uname: &dyn Fn() -> Option<String>,
) -> Option<String> {
    let name = |s: String| Some(s.trim().to_owned()).filter(|s| !s.is_empty());
    ["/proc/sys/kernel/hostname", "/etc/hostname"]
        .iter()
        .find_map(|path| read_file(path).and_then(name))
        .or_else(|| {
            ["HOSTNAME", "COMPUTERNAME"]
                .iter()
                .find_map(|v| var(v).and_then(name))
        })
        .or_else(|| uname().and_then(name))
}

/// `uname -n`, the node name POSIX systems report.
fn uname_n() -> Option<String> {
    let out = std::process::Command::new("uname")
        .arg("-n")
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_name_without_proc_or_etc_hostname_asks_uname() {
        // macOS, the BSDs, a Linux container without /proc: no files, no
        // exported HOSTNAME.
        let none = |_: &str| None;
        let uname = || Some("mac-mini.local\n".to_owned());
        assert_eq!(
            host_name(&none, &none, &uname).as_deref(),
            Some("mac-mini.local")
        );
        // Linux: the kernel's name first, without asking uname.
        let proc = |p: &str| (p == "/proc/sys/kernel/hostname").then(|| "build-03\n".to_owned());
        let never = || -> Option<String> { panic!("uname asked") };
        assert_eq!(host_name(&proc, &none, &never).as_deref(), Some("build-03"));
        // Windows: COMPUTERNAME.
        let windows = |v: &str| (v == "COMPUTERNAME").then(|| "WIN-7".to_owned());
        assert_eq!(host_name(&none, &windows, &never).as_deref(), Some("WIN-7"));
        // Nothing anywhere, or only blanks.
        let blank = |_: &str| Some(" \n".to_owned());
        assert_eq!(host_name(&blank, &blank, &|| None), None);
    }

    #[test]
    fn metadata_names_host_and_pid() {
        let m = default_metadata();
        assert!(m.ends_with(&format!(":{}", std::process::id())), "{m}");
        assert!(m.len() > 2);
    }
}
