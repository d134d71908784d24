//! The network broker end to end: real clients inside the sandbox (curl through HTTPS_PROXY
//! and socks5h, bash /dev/tcp through host_ports), a stub DNS server and test servers on the
//! host's loopback (127.0.0.2 is allowed only through an explicit test `allow_cidrs`). Nothing
//! here sends traffic anywhere but loopback.

use std::sync::atomic::Ordering;

use vetto_integration::{both, echo_server, err, http_server, out, Fixture, StubDns};

fn policy(f: &Fixture, body: &str) -> String {
    let p = f.root.join("outside/net.toml");
    std::fs::write(&p, body).expect("w");
    f.own(&p);
    p.display().to_string()
}

both!(allowlisted_name_through_http_and_socks_proxies, |f| {
    let dns = StubDns::start();
    let (srv, hits) = http_server("127.0.0.2:0");
    let port = srv.port();
    dns.set("api.test.vetto", &["127.0.0.2"]);
    let p = policy(
        f,
        &format!(
            "[network]\nmode = \"allowlist\"\nallow = [\"api.test.vetto:{port}\"]\nallow_cidrs = [\"127.0.0.2/32\"]\nresolver = \"{}\"\n",
            dns.addr
        ),
    );
    let script = format!(
        "curl -sS -p http://api.test.vetto:{port}/; echo; \
         curl -sS --socks5-hostname 127.0.0.1:1080 http://API.Test.Vetto.:{port}/; echo; \
         curl -sS -p -o /dev/null -w '%{{http_connect}}\\n' http://other.test.vetto:{port}/ 2>/dev/null; \
         (exec 3<>/dev/tcp/127.0.0.2/{port}) 2>/dev/null && echo BYPASS || echo no-bypass"
    );
    let o = f.run_sh(&["--policy", &p], &script);
    assert_eq!(out(&o), "hello\nhello\n403\nno-bypass\n", "{}", err(&o));
    assert_eq!(
        hits.load(Ordering::SeqCst),
        2,
        "exactly the two allowed requests reached the server"
    );
    let asked = dns.asked();
    assert!(
        asked.iter().all(|n| n == "api.test.vetto"),
        "a denied name was resolved: {asked:?}"
    );
    assert!(!asked.is_empty());
});

both!(rebinding_to_private_answers_is_refused, |f| {
    let dns = StubDns::start();
    let (srv, hits) = http_server("127.0.0.2:0");
    let port = srv.port();
    let p = policy(
        f,
        &format!(
            "[network]\nmode = \"allowlist\"\nallow = [\"api.test.vetto:{port}\"]\nallow_cidrs = [\"127.0.0.2/32\"]\nresolver = \"{}\"\n",
            dns.addr
        ),
    );
    let probe = format!("curl -sS -p -o /dev/null -w '%{{http_connect}}' http://api.test.vetto:{port}/ 2>/dev/null; echo");
    for answer in [
        &["127.0.0.1"][..],
        &["169.254.169.254"],
        &["::ffff:127.0.0.1"],
        &["127.0.0.2", "127.0.0.1"],
    ] {
        dns.set("api.test.vetto", answer);
        let o = f.run_sh(&["--policy", &p], &probe);
        assert_eq!(out(&o), "403\n", "answer {answer:?}: {}", err(&o));
    }
    assert_eq!(
        hits.load(Ordering::SeqCst),
        0,
        "a refused answer reached the server"
    );
});

both!(host_ports_reach_the_host_loopback, |f| {
    let echo = echo_server("127.0.0.1:0");
    let p = policy(
        f,
        &format!(
            "[network]\nmode = \"allowlist\"\nhost_ports = [{}]\n",
            echo.port()
        ),
    );
    let script = format!(
        "exec 3<>/dev/tcp/127.0.0.1/{}; echo ping-through >&3; read -r line <&3; echo \"$line\"",
        echo.port()
    );
    let o = f.run_argv(&["--policy", &p], &["/bin/bash", "-c", &script]);
    assert_eq!(out(&o), "ping-through\n", "{}", err(&o));
});

both!(network_off_sets_no_proxy_and_reaches_nothing, |f| {
    let (srv, hits) = http_server("127.0.0.1:0");
    let o = f.run_sh(&[], &format!("echo \"proxy=${{HTTPS_PROXY:-none}}\"; curl -sS -m 5 http://127.0.0.1:{}/ 2>/dev/null || echo unreachable", srv.port()));
    assert_eq!(out(&o), "proxy=none\nunreachable\n", "{}", err(&o));
    assert_eq!(hits.load(Ordering::SeqCst), 0);
});

both!(vetto_connect_relays_for_ssh_proxycommand, |f| {
    let dns = StubDns::start();
    let echo = echo_server("127.0.0.2:0");
    dns.set("git.test.vetto", &["127.0.0.2"]);
    let p = policy(
        f,
        &format!(
            "[network]\nmode = \"allowlist\"\nallow = [\"git.test.vetto:{}\"]\nallow_cidrs = [\"127.0.0.2/32\"]\nresolver = \"{}\"\n",
            echo.port(),
            dns.addr
        ),
    );
    let script = format!(
        "echo \"$GIT_SSH_COMMAND\"; echo ssh-bytes | /tmp/.vetto/vetto connect git.test.vetto {}; \
         /tmp/.vetto/vetto connect elsewhere.test.vetto 22 </dev/null 2>&1; echo \"rc=$?\"",
        echo.port()
    );
    let o = f.run_sh(&["--policy", &p, "--git-ssh"], &script);
    let s = out(&o);
    let lines: Vec<&str> = s.lines().collect();
    assert_eq!(
        lines.first(),
        Some(&"ssh -o ProxyCommand='/tmp/.vetto/vetto connect %h %p'"),
        "{s} {}",
        err(&o)
    );
    assert_eq!(lines.get(1), Some(&"ssh-bytes"), "{s} {}", err(&o));
    assert!(
        s.contains("elsewhere.test.vetto:22: not allowed by the sandbox's network policy"),
        "{s}"
    );
    assert!(s.ends_with("rc=2\n"), "{s}");
    assert!(
        !dns.asked().iter().any(|n| n.starts_with("elsewhere")),
        "{:?}",
        dns.asked()
    );
});

both!(git_ssh_needs_the_network, |f| {
    let o = f.run_sh(&["--git-ssh"], "true");
    assert_eq!(o.status.code(), Some(2));
    assert!(
        err(&o).contains("--git-ssh: the network is off"),
        "{}",
        err(&o)
    );
});

both!(net_flag_and_strict_mode, |f| {
    let dns = StubDns::start();
    let (srv, hits) = http_server("127.0.0.2:0");
    dns.set("api.test.vetto", &["127.0.0.2"]);
    let port = srv.port();
    let p = policy(
        f,
        &format!(
            "[network]\nallow_cidrs = [\"127.0.0.2/32\"]\nresolver = \"{}\"\n",
            dns.addr
        ),
    );
    let net = format!("strict:api.test.vetto:{port}");
    let script = format!(
        "curl -sS -p http://api.test.vetto:{port}/; echo; curl -sS -p -o /dev/null -w '%{{http_connect}}\\n' http://127.0.0.2:{port}/ 2>/dev/null"
    );
    let o = f.run_sh(&["--policy", &p, "--net", &net], &script);
    assert_eq!(
        out(&o),
        "hello\n403\n",
        "strict refuses IP literals even inside allow_cidrs: {}",
        err(&o)
    );
    assert_eq!(hits.load(Ordering::SeqCst), 1);
    let o = f.run_sh(&["--net", "sideways"], "true");
    assert_eq!(o.status.code(), Some(2));
    assert!(
        err(&o).contains("--net: unknown mode `sideways`"),
        "{}",
        err(&o)
    );
});

const BULK_ECHO: &str = r#"
import hashlib, os, socket, sys, threading
port = int(sys.argv[1])
c = socket.create_connection(("127.0.0.1", 3128))
c.sendall(f"CONNECT 127.0.0.2:{port} HTTP/1.1\r\n\r\n".encode())
head = b""
while b"\r\n\r\n" not in head:
    head += c.recv(1)
assert head.startswith(b"HTTP/1.1 200"), head
data = os.urandom(8 << 20).replace(b"\n", b"x")
def send():
    c.sendall(data)
    c.shutdown(socket.SHUT_WR)
t = threading.Thread(target=send); t.start()
got = bytearray()
while True:
    b = c.recv(1 << 16)
    if not b:
        break
    got += b
t.join()
print(len(got), hashlib.sha256(got).hexdigest() == hashlib.sha256(data).hexdigest())
"#;

both!(bulk_transfer_both_ways_with_half_close, |f| {
    let echo = echo_server("127.0.0.2:0");
    let p = policy(
        f,
        &format!(
            "[network]\nmode = \"allowlist\"\nallow_cidrs = [\"127.0.0.2/32:{}\"]\n",
            echo.port()
        ),
    );
    let port = echo.port().to_string();
    let o = f.run_argv(
        &["--policy", &p],
        &["/usr/bin/python3", "-c", BULK_ECHO, &port],
    );
    assert_eq!(out(&o), format!("{} True\n", 8 << 20), "{}", err(&o));
});

/// git over ssh through the broker to a real sshd on the host's 127.0.0.2. Root variant
/// only: sshd must run as root to serve a login (an unprivileged sshd can only log in its
/// own user, and `nobody` has no shell).
#[test]
fn git_over_ssh_through_the_broker() {
    if !vetto_integration::is_root() || !std::path::Path::new("/usr/sbin/sshd").exists() {
        eprintln!("skipped: needs root and openssh-server (scripts/deps.sh installs it)");
        return;
    }
    let f = Fixture::new(vetto_integration::Mode::Root);
    let d = f.root.join("outside");
    let sh = |c: &str| {
        let o = std::process::Command::new("sh")
            .arg("-c")
            .arg(c)
            .output()
            .expect("sh");
        assert!(o.status.success(), "{c}: {}", err(&o));
    };
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.2:0").expect("port");
        l.local_addr().expect("a").port()
    };
    let (dd, pd) = (d.display(), f.proj.display());
    sh(&format!("ssh-keygen -q -t ed25519 -N '' -f {dd}/hostkey && ssh-keygen -q -t ed25519 -N '' -f {pd}/id_test && cp {pd}/id_test.pub {dd}/authorized_keys && mkdir -p /run/sshd"));
    std::fs::write(
        d.join("sshd_config"),
        format!(
            "Port {port}\nListenAddress 127.0.0.2\nHostKey {dd}/hostkey\nAuthorizedKeysFile {dd}/authorized_keys\nPasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\nPidFile {dd}/sshd.pid\nPermitRootLogin prohibit-password\n"
        ),
    )
    .expect("w");
    sh(&format!("git init -q --bare {dd}/repo.git && git -C {pd} push -q {dd}/repo.git HEAD:refs/heads/main && git -C {dd}/repo.git symbolic-ref HEAD refs/heads/main"));
    let mut sshd = std::process::Command::new("/usr/sbin/sshd")
        .args(["-D", "-e", "-f"])
        .arg(d.join("sshd_config"))
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("sshd");
    assert!(
        vetto_integration::eventually(5, || std::net::TcpStream::connect(("127.0.0.2", port))
            .is_ok()),
        "sshd did not start"
    );
    let dns = StubDns::start();
    dns.set("git.test.vetto", &["127.0.0.2"]);
    let p = policy(
        &f,
        &format!("[network]\nmode = \"allowlist\"\nallow = [\"git.test.vetto:{port}\"]\nallow_cidrs = [\"127.0.0.2/32\"]\nresolver = \"{}\"\n", dns.addr),
    );
    let script = format!(
        "export GIT_SSH_COMMAND=\"$GIT_SSH_COMMAND -i $PWD/id_test -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR -o ConnectTimeout=10\"; \
         git clone -q ssh://root@git.test.vetto:{port}{dd}/repo.git cloned && git -C cloned log -1 --format=%s && \
         echo more >> cloned/README && git -C cloned commit -qam 'pushed from the sandbox' && git -C cloned push -q origin main && echo pushed"
    );
    let o = f.run_sh(&["--policy", &p, "--git-ssh"], &script);
    let _ = sshd.kill();
    let _ = sshd.wait();
    assert_eq!(out(&o), "init\npushed\n", "{}", err(&o));
    let log = std::process::Command::new("git")
        .args([
            "-C",
            &format!("{dd}/repo.git"),
            "log",
            "-1",
            "--format=%s",
            "main",
        ])
        .output()
        .expect("git");
    assert_eq!(out(&log), "pushed from the sandbox\n");
}

both!(broker_crash_closes_the_network, |f| {
    let dns = StubDns::start();
    let (srv, hits) = http_server("127.0.0.2:0");
    let port = srv.port();
    dns.set("api.test.vetto", &["127.0.0.2"]);
    let p = policy(
        f,
        &format!("[network]\nmode = \"allowlist\"\nallow = [\"api.test.vetto:{port}\"]\nallow_cidrs = [\"127.0.0.2/32\"]\nresolver = \"{}\"\n", dns.addr),
    );
    let script = format!(
        "curl -sS -p http://api.test.vetto:{port}/ > first.out; touch first.done; \
         while [ ! -e killed ]; do sleep 0.05; done; \
         curl -sS -m 5 -p http://api.test.vetto:{port}/ 2>/dev/null && echo REACHED || echo closed"
    );
    let child = f
        .run_command(
            &["--policy", &p],
            &["/bin/sh", "-c", &script],
            &f.base_env(),
        )
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    assert!(
        vetto_integration::eventually(10, || f.proj.join("first.done").exists()),
        "first request never finished"
    );
    // The broker is the supervisor's child running `vetto __broker`.
    let sup = vetto_integration::supervisor_of(child.id()).expect("the supervisor");
    let broker: Vec<u32> = vetto_integration::pids_with("__broker")
        .into_iter()
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|s| {
                    s.rsplit_once(')')
                        .and_then(|(_, r)| r.split_whitespace().nth(1).map(str::to_string))
                })
                .is_some_and(|ppid| ppid == sup.to_string())
        })
        .collect();
    assert_eq!(broker.len(), 1, "broker of this session not found");
    // SAFETY: killing the broker process this test's session started.
    unsafe { libc::kill(broker[0] as i32, libc::SIGKILL) };
    std::fs::write(f.proj.join("killed"), "").expect("w");
    let o = child.wait_with_output().expect("wait");
    assert_eq!(
        std::fs::read_to_string(f.proj.join("first.out")).expect("r"),
        "hello"
    );
    assert_eq!(out(&o), "closed\n", "{}", err(&o));
    assert_eq!(hits.load(Ordering::SeqCst), 1);
});

const SANDBOX_SERVER: &str = r#"
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen(4)
open("listening", "w").close()
c, _ = s.accept()
c.sendall(b"from-inside:" + c.recv(100))
c.close()
"#;

both!(publish_exposes_a_sandbox_port_on_the_host_loopback, |f| {
    use std::io::{Read, Write};
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .expect("b")
        .local_addr()
        .expect("a")
        .port();
    let p = policy(
        f,
        &format!("[network]\nmode = \"allowlist\"\npublish = [{port}]\n"),
    );
    let ps = port.to_string();
    let child = f
        .run_command(
            &["--policy", &p],
            &["/usr/bin/python3", "-c", SANDBOX_SERVER, &ps],
            &f.base_env(),
        )
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    assert!(
        vetto_integration::eventually(10, || f.proj.join("listening").exists()),
        "sandbox server never listened"
    );
    let mut c =
        std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect to the published port");
    c.write_all(b"hello").expect("w");
    let mut got = String::new();
    c.read_to_string(&mut got).expect("r");
    assert_eq!(got, "from-inside:hello");
    let o = child.wait_with_output().expect("wait");
    assert!(o.status.success(), "{}", err(&o));
});

both!(publish_port_in_use_refuses_before_starting, |f| {
    let busy = std::net::TcpListener::bind("127.0.0.1:0").expect("b");
    let port = busy.local_addr().expect("a").port();
    let p = policy(
        f,
        &format!("[network]\nmode = \"allowlist\"\npublish = [{port}]\n"),
    );
    let o = f.run_sh(&["--policy", &p], "touch ran");
    assert_ne!(o.status.code(), Some(0));
    assert!(
        err(&o).contains(&format!(
            "network.publish: cannot listen on the host's 127.0.0.1:{port}"
        )),
        "{}",
        err(&o)
    );
    assert!(!f.proj.join("ran").exists());
    assert!(f.settled_sessions().is_empty());
});

both!(plain_http_through_the_proxy_needs_its_port_listed, |f| {
    let dns = StubDns::start();
    let (srv, hits) = http_server("127.0.0.2:0");
    let port = srv.port();
    dns.set("api.test.vetto", &["127.0.0.2"]);
    dns.set("web.test.vetto", &["127.0.0.2"]);
    let p = policy(
        f,
        &format!(
            "[network]\nmode = \"allowlist\"\nallow = [\"api.test.vetto:{port}\", \"web.test.vetto\"]\nallow_cidrs = [\"127.0.0.2/32\"]\nresolver = \"{}\"\n",
            dns.addr
        ),
    );
    // curl sends plain http:// through HTTP_PROXY as an absolute-form request (no CONNECT).
    let script = format!(
        "curl -sS http://api.test.vetto:{port}/plain; echo; \
         curl -sS -o /dev/null -w '%{{http_code}}\\n' http://web.test.vetto:{port}/ 2>/dev/null"
    );
    let o = f.run_sh(&["--policy", &p], &script);
    assert_eq!(
        out(&o),
        "hello\n403\n",
        "web.test.vetto is allowed on 443 only: {}",
        err(&o)
    );
    assert_eq!(hits.load(Ordering::SeqCst), 1);
});

both!(invalid_network_entries_are_bad_input, |f| {
    for (entry, reason) in [
        (
            "*.com",
            "a wildcard over a single-label suffix is too broad",
        ),
        ("93.184.216.34", "is an IP address; use allow_cidrs"),
    ] {
        let quoted = format!("{entry:?}");
        // In a policy file, with the network on and off: `vetto policy check FILE`.
        for mode in ["mode = \"allowlist\"\n", ""] {
            let p = policy(f, &format!("[network]\n{mode}allow = [{quoted}]\n"));
            let o = f.vetto(&["policy", "check", &p]);
            let e = err(&o);
            assert_eq!(o.status.code(), Some(2), "{entry} {mode}: {e}");
            assert!(out(&o).is_empty(), "{}", out(&o));
            assert!(
                e.contains(&format!(
                    "network.allow (policy file {p}): allowlist entry {quoted}"
                )) && e.contains(reason),
                "{e}"
            );
            assert_eq!(e.matches(&quoted).count(), 1, "reported once: {e}");
            // `vetto run` with that file: refused before a sandbox exists.
            let o = f.run_sh(&["--policy", &p], "touch ran");
            assert_eq!(o.status.code(), Some(2), "{}", err(&o));
            assert_eq!(err(&o).matches(&quoted).count(), 1, "{}", err(&o));
        }
        // From the flag: `vetto policy check` (no FILE), `explain` and `run`.
        let net = format!("allow:{entry}");
        for args in [
            vec!["policy", "check", "--net", &net],
            vec!["policy", "explain", "--net", &net],
        ] {
            let o = f.vetto(&args);
            let e = err(&o);
            assert_eq!(o.status.code(), Some(2), "{args:?}: {e}");
            assert!(
                e.contains(&format!(
                    "network.allow (flag --net): allowlist entry {quoted}"
                )),
                "{args:?}: {e}"
            );
            assert_eq!(e.matches(&quoted).count(), 1, "{args:?}: {e}");
        }
        let o = f.run_sh(&["--net", &net], "touch ran");
        let e = err(&o);
        assert_eq!(o.status.code(), Some(2), "{e}");
        assert_eq!(
            e.lines().filter(|l| l.contains(&quoted)).count(),
            1,
            "printed once: {e}"
        );
        assert_eq!(e.matches(reason).count(), 1, "printed once: {e}");
        assert!(!f.proj.join("ran").exists(), "the command ran: {e}");
        assert!(
            f.settled_sessions().is_empty(),
            "{:?}",
            f.leftover_sessions()
        );
    }
    // A value the policy layer accepts but the broker would not start with.
    let p = policy(
        f,
        "[network]\nmode = \"allowlist\"\nallow = [\"crates.io\"]\nresolver = \"0.0.0.0:53\"\n",
    );
    let o = f.run_sh(&["--policy", &p], "touch ran");
    let e = err(&o);
    assert_eq!(o.status.code(), Some(2), "{e}");
    assert!(
        e.contains("network.resolver") && e.contains("\"0.0.0.0:53\" is not a usable unicast"),
        "{e}"
    );
    assert!(!f.proj.join("ran").exists());
    assert!(f.settled_sessions().is_empty());
});
