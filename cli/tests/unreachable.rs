//! A server the command cannot use: it says which URL it tried (from
//! `--url` or `$REDIS_URL`), never its password, and why.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::*;
use socket2::{Domain, Socket, Type};

/// A loopback port bound and never listened on, while this lives: a
/// connection to it is refused, and no other socket can bind it (this one
/// is bound without `SO_REUSEADDR`, which servers set, so theirs fail).
struct ClosedPort(Socket);

impl ClosedPort {
    fn hold() -> Self {
        let socket = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
        let any_port: std::net::SocketAddr = "127.0.0.1:0".parse().unwrap();
        socket.bind(&any_port.into()).unwrap();
        ClosedPort(socket)
    }

    fn port(&self) -> u16 {
        self.0.local_addr().unwrap().as_socket().unwrap().port()
    }
}

/// A port no server listens on: every command exits 69 naming the
/// address, where the URL came from and the cause, without the password.
///
/// The port is held closed, not freed by a stopped server: a freed port
/// can be taken by any server started meanwhile on the machine (another
/// test's), which then answers the handshake ("authentication failed").
#[test]
fn an_unreachable_server_is_named_without_its_password() {
    let s = setup("unreachable");
    let closed = ClosedPort::hold();
    let port = closed.port();
    let url = format!("redis://:s3cret@127.0.0.1:{port}/");
    for args in [
        &["holder", "ukey"][..],
        &["list"],
        &["run", "ukey", "--", "true"],
        &["run", "-w", "1s", "ukey", "--", "true"],
    ] {
        for from_env in [true, false] {
            let option = format!("--url={url}");
            let mut cmd = if from_env {
                let mut cmd = s.cmd(args);
                cmd.env("REDIS_URL", &url);
                cmd
            } else {
                // The option after the subcommand's name, before its key.
                let mut with_url = args.to_vec();
                with_url.insert(1, &option);
                let mut cmd = s.cmd(&with_url);
                cmd.env_remove("REDIS_URL");
                cmd
            };
            let out = cmd.output().unwrap();
            let said = String::from_utf8_lossy(&out.stderr);
            assert_eq!(code(&out), 69, "{args:?}: {out:?}");
            assert!(
                !said.contains("s3cret"),
                "{args:?} shows the password: {said}"
            );
            assert!(
                said.contains(&format!("127.0.0.1:{port}")),
                "{args:?}: {said}"
            );
            assert!(said.contains("connection refused"), "{args:?}: {said}");
            let source = if from_env { "$REDIS_URL" } else { "--url" };
            assert!(said.contains(source), "{args:?}: {said}");
        }
    }
}
