//! `vetto connect HOST PORT`: a stdio relay through the broker's SOCKS5 listener, for use
//! inside the sandbox as `ssh -o ProxyCommand='vetto connect %h %p'` (what `--git-ssh`
//! sets up). The name travels to the broker unresolved (socks5h): DNS happens outside.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::fd::FromRawFd;

use anyhow::{bail, Context, Result};

const DEFAULT_PROXY: &str = "127.0.0.1:1080";

fn proxy_addr() -> String {
    std::env::var("ALL_PROXY")
        .or_else(|_| std::env::var("all_proxy"))
        .ok()
        .and_then(|v| {
            v.strip_prefix("socks5h://")
                .map(|s| s.trim_end_matches('/').to_string())
        })
        .unwrap_or_else(|| DEFAULT_PROXY.to_string())
}

fn socks_error(code: u8) -> &'static str {
    match code {
        0x01 => "general failure (broker busy?)",
        0x02 => "not allowed by the sandbox's network policy",
        0x03 => "network unreachable",
        0x04 => "host unreachable (name did not resolve to an allowed address)",
        0x05 => "connection refused",
        0x06 => "TTL expired",
        0x07 => "command not supported",
        0x08 => "address type not supported",
        _ => "unknown error",
    }
}

/// Connect to `host:port` through the broker and relay stdin/stdout.
pub fn run(host: &str, port: u16) -> Result<()> {
    if host.is_empty() || host.len() > 255 {
        bail!("connect: bad host name");
    }
    let proxy = proxy_addr();
    let mut s = TcpStream::connect(&proxy).with_context(|| {
        format!("connect: the broker at {proxy} is not reachable (is the network mode allowlist?)")
    })?;
    s.write_all(&[5, 1, 0])?;
    let mut hello = [0u8; 2];
    s.read_exact(&mut hello)?;
    if hello != [5, 0] {
        bail!("connect: the broker refused the SOCKS5 greeting");
    }
    let mut req = vec![5, 1, 0, 3, host.len() as u8];
    req.extend_from_slice(host.as_bytes());
    req.extend_from_slice(&port.to_be_bytes());
    s.write_all(&req)?;
    let mut head = [0u8; 4];
    s.read_exact(&mut head)?;
    if head[1] != 0 {
        bail!("connect: {host}:{port}: {}", socks_error(head[1]));
    }
    let rest = match head[3] {
        1 => 4 + 2,
        4 => 16 + 2,
        3 => {
            let mut l = [0u8; 1];
            s.read_exact(&mut l)?;
            l[0] as usize + 2
        }
        _ => bail!("connect: malformed reply from the broker"),
    };
    let mut skip = vec![0u8; rest];
    s.read_exact(&mut skip)?;
    // Plain read/write loops on the raw descriptors: std's stdout is line-buffered (ssh's
    // binary packets would wait for a newline) and std::io::copy's kernel-copy paths may
    // wait for more data than an interactive protocol sends.
    // SAFETY: fds 0 and 1 stay open for the life of the process; ManuallyDrop never closes them.
    let mut stdin = std::mem::ManuallyDrop::new(unsafe { std::fs::File::from_raw_fd(0) });
    // SAFETY: as above.
    let mut stdout = std::mem::ManuallyDrop::new(unsafe { std::fs::File::from_raw_fd(1) });
    let mut up = s.try_clone()?;
    let t = std::thread::spawn(move || {
        let _ = pump(&mut *stdin, &mut up);
        let _ = up.shutdown(std::net::Shutdown::Write);
    });
    pump(&mut s, &mut *stdout)?;
    drop(t);
    Ok(())
}

fn pump(r: &mut impl Read, w: &mut impl Write) -> std::io::Result<()> {
    let mut buf = [0u8; 16384];
    loop {
        let n = match r.read(&mut buf) {
            Ok(0) => return Ok(()),
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        w.write_all(&buf[..n])?;
    }
}
