#!/usr/bin/env python3
"""vetto's escape suite: the untrusted agent's side of the threat model, played for real.

Every case is an attack run inside a real sandbox, followed by the host-side check that it
left nothing behind. A case states the attack, what each tier must do with it, and asserts it.

    tests/escape/suite.py --tier full --mode root|rootless [--only ID,...] [--json OUT]
    tests/escape/suite.py --tier fs-only --mode root|rootless [--only ID,...] [--json OUT]
    tests/escape/suite.py --tier shim [--json OUT]          (Podman driving vetto-shim, hardened)
    tests/escape/suite.py --docs RESULTS.json... > docs/security-tests.md fragment

`make escape` runs the full tier as root and as nobody, the fs-only tier (`vetto run --tier
fs-only`: no namespaces, the host's own filesystem and processes under Landlock and seccomp)
the same two ways, then the shim tier, and rewrites the results table in
docs/security-tests.md. Network cases talk only to listeners this script
starts on 127.0.0.1 and ::1; nothing here sends a packet to any other address.

The suite ends with `N passed, M failed` and a table of case -> outcome; exit 1 on any
unexpected outcome.
"""

import argparse
import hashlib
import json
import os
import pty
import re
import select
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
NOBODY = 65534
SECRET = "dummy-secret-value"
TOKEN = "ghp_dummy_token_value"

# Shell prelude for scripts run inside: refuse to run outside a sandbox (no tier grants
# CAP_SYS_ADMIN; an attack run on the host by mistake would hit the machine), then
# `t NAME 'command'` prints `NAME: allowed` when the command succeeds, else
# `NAME: <the last part of its error>`.
PRELUDE = r"""
cap=$(sed -n 's/^CapEff:[[:space:]]*//p' /proc/self/status)
if [ $(( 0x$cap >> 21 & 1 )) -eq 1 ]; then
  echo "escape suite: this shell holds CAP_SYS_ADMIN, so it is not in a sandbox; refusing to attack the host" >&2
  exit 3
fi
t() { n=$1; shift; if o=$( (eval "$*") 2>&1 ); then echo "$n: allowed"; else echo "$n: ${o##*: }"; fi; }
"""


class Escape(Exception):
    """The attack got further than the tier allows (or the check could not run)."""


def need(cond, msg):
    if not cond:
        raise Escape(msg)


def results(out):
    """`NAME: RESULT` lines of a probe or `t` run."""
    r = {}
    for line in out.splitlines():
        m = re.match(r"^([A-Za-z0-9_.-]+): (.*)$", line)
        if m:
            r[m.group(1)] = m.group(2).strip()
    return r


SUCCESS = ("allowed", "connected")


def refused(out, *names):
    """Every named attempt was refused; returns 'name=result' text for the table."""
    r = results(out)
    seen = []
    for n in names:
        need(n in r, f"{n}: no result (output: {out!r})")
        need(
            not r[n].startswith(SUCCESS) and not r[n].startswith("sent"),
            f"{n}: {r[n]}",
        )
        seen.append(r[n])
    uniq = sorted(set(seen))
    return ", ".join(uniq)


def sh(cmd, **kw):
    return subprocess.run(["sh", "-c", cmd], check=True, **kw)


def sha(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


# --- listeners on the host's loopback --------------------------------------------------------


class Listeners:
    """TCP on 127.0.0.1 and ::1, a UDP sink, a DNS stub (answers every A with 127.0.0.1 and
    every AAAA with ::ffff:127.0.0.1), an abstract unix socket: each counts what reaches it."""

    def __init__(self):
        self.counts = {"tcp4": 0, "tcp6": 0, "udp": 0, "dns": 0, "abstract": 0}
        self.lock = threading.Lock()
        self.tcp4 = self._tcp(socket.AF_INET, "127.0.0.1", "tcp4")
        self.tcp6 = self._tcp(socket.AF_INET6, "::1", "tcp6")
        self.udp = self._udp("udp", answer=False)
        self.dns = self._udp("dns", answer=True)
        self.abstract_name = f"vetto-escape-{os.getpid()}"
        a = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        a.bind("\0" + self.abstract_name)
        a.listen(16)
        threading.Thread(target=self._accept, args=(a, "abstract"), daemon=True).start()

    def _tcp(self, fam, addr, key):
        s = socket.socket(fam, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((addr, 0))
        s.listen(64)
        threading.Thread(target=self._accept, args=(s, key), daemon=True).start()
        return s.getsockname()[1]

    def _accept(self, s, key):
        while True:
            c, _ = s.accept()
            with self.lock:
                self.counts[key] += 1
            c.close()

    def _udp(self, key, answer):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind(("127.0.0.1", 0))
        threading.Thread(target=self._serve_udp, args=(s, key, answer), daemon=True).start()
        return s.getsockname()[1]

    def _serve_udp(self, s, key, answer):
        while True:
            data, peer = s.recvfrom(2048)
            with self.lock:
                self.counts[key] += 1
            if answer and len(data) > 12:
                self._answer(s, data, peer)

    @staticmethod
    def _answer(s, q, peer):
        # The question ends after the name's zero label plus QTYPE and QCLASS.
        end = 12
        while end < len(q) and q[end] != 0:
            end += q[end] + 1
        end += 5
        qtype = int.from_bytes(q[end - 4 : end - 2], "big")
        if qtype == 1:
            rdata = socket.inet_pton(socket.AF_INET, "127.0.0.1")
        elif qtype == 28:
            rdata = socket.inet_pton(socket.AF_INET6, "::ffff:127.0.0.1")
        else:
            rdata = None
        head = q[:2] + b"\x81\x80" + q[4:6] + (b"\x00\x01" if rdata else b"\x00\x00") + b"\x00\x00\x00\x00"
        body = q[12:end]
        if rdata:
            body += b"\xc0\x0c" + qtype.to_bytes(2, "big") + b"\x00\x01" + (30).to_bytes(4, "big")
            body += len(rdata).to_bytes(2, "big") + rdata
        s.sendto(head + body, peer)

    def snapshot(self):
        with self.lock:
            return dict(self.counts)


# --- the staged world ------------------------------------------------------------------------


class Template:
    """A HOME with secrets, a project (git repository with submodule, nested repository,
    hooks path, includes, agent and editor settings, a policy file, secrets at several depths),
    a directory outside the project and a runtime dir; copied afresh for every case."""

    def __init__(self, base, uid, vetto, probe):
        self.base = base
        t = os.path.join(base, "template")
        self.t = t
        home, proj, out = f"{t}/home", f"{t}/proj", f"{t}/outside"
        for d in [f"{home}/.ssh", f"{home}/.aws", f"{home}/.config", proj, out, f"{t}/run", f"{t}/shared"]:
            os.makedirs(d)
        w = lambda p, s: open(p, "w").write(s)
        w(f"{home}/.ssh/id_ed25519", f"-----BEGIN OPENSSH PRIVATE KEY----- {SECRET}\n")
        w(f"{home}/.aws/credentials", f"[default]\naws_secret_access_key={SECRET}\n")
        w(f"{home}/.netrc", f"machine example.invalid password {SECRET}\n")
        w(f"{home}/.gitconfig", "[user]\n\tname = Escape\n\temail = e@example.invalid\n[init]\n\tdefaultBranch = main\n[protocol \"file\"]\n\tallow = always\n")
        w(f"{out}/decoy", "DECOY\n")
        w(f"{t}/shared/token", f"{SECRET}\n")
        w(f"{t}/shared/readme", "shared\n")
        env = {"HOME": home, "PATH": "/usr/bin:/bin", "GIT_CONFIG_NOSYSTEM": "1"}
        setup = f"""
set -e
cd {proj}
git init -q .
printf 'hello\\n' > README
printf 'API_KEY={SECRET}\\n' > .env
mkdir -p deep/dir realcfg .vscode .claude .devcontainer .github/workflows .husky conf
printf 'DEEP={SECRET}\\n' > deep/dir/.env
printf 'CFG={SECRET}\\n' > realcfg/.env
ln -s realcfg cfg
printf '{{}}\\n' > .vscode/tasks.json
printf '{{"permissions": {{"allow": []}}}}\\n' > .claude/settings.json
printf '{{"name": "x"}}\\n' > .devcontainer/devcontainer.json
printf 'on: push\\n' > .github/workflows/ci.yml
printf '#!/bin/sh\\nexit 0\\n' > .husky/pre-commit
chmod +x .husky/pre-commit
git config core.hooksPath .husky
printf '[user]\\n\\tname = Shared\\n' > shared.gitconfig
git config include.path ../shared.gitconfig
printf '[network]\\nmode = "off"\\n' > conf/vetto.toml
printf 'all:\\n\\ttrue\\n' > Makefile
git add README Makefile .vscode .claude .devcontainer .github .husky conf
git commit -qm init
mkdir -p .git/modules && git init -q --separate-git-dir=.git/modules/sub sub
(cd sub && echo s > f && git add f && git commit -qm sub)
printf '[submodule "sub"]\\n\\tpath = sub\\n\\turl = ./sub\\n' > .gitmodules
mkdir -p vendor/lib && (cd vendor/lib && git init -q . && echo v > v && git add v && git commit -qm v)
"""
        subprocess.run(["sh", "-c", setup], check=True, env=env)
        shutil.copy(probe, f"{proj}/escape-probe")
        os.makedirs(f"{t}/bin")
        shutil.copy(vetto, f"{t}/bin/vetto")
        os.chmod(f"{t}/bin/vetto", 0o755)
        os.chmod(f"{t}/run", 0o700)
        if uid != os.geteuid():
            sh(f"chown -R {uid}:{uid} '{t}/home' '{t}/proj' '{t}/outside' '{t}/run' '{t}/shared'")
        self.n = 0

    def world(self):
        self.n += 1
        d = os.path.join(self.base, f"case{self.n}")
        subprocess.run(["cp", "-a", self.t, d], check=True)
        return d


class Run:
    def __init__(self, rc, out, err):
        self.rc, self.out, self.err = rc, out, err


class Full:
    """`vetto run` as root or as nobody (setpriv), in a fresh copy of the world."""

    tier = "full"

    def __init__(self, mode, template, listeners):
        self.mode = mode
        self.uid = NOBODY if mode == "rootless" and os.geteuid() == 0 else os.geteuid()
        self.template = template
        self.net = listeners
        self.pols = 0

    def fresh(self):
        self.root = self.template.world()
        self.home = f"{self.root}/home"
        self.proj = f"{self.root}/proj"
        self.outside = f"{self.root}/outside"
        self.vetto = f"{self.root}/bin/vetto"
        self.marker = f"{self.outside}/PWNED"
        self.probe = f"{self.proj}/escape-probe"
        self.inside_proj = self.proj

    def env(self):
        return {
            "HOME": self.home,
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "XDG_RUNTIME_DIR": f"{self.root}/run",
            "XDG_CONFIG_HOME": f"{self.home}/.config",
            "LANG": "C.UTF-8",
            "GH_TOKEN": TOKEN,
            "OPENAI_API_KEY": "sk-" + SECRET,
            "AWS_SECRET_ACCESS_KEY": SECRET,
        }

    def as_user(self, argv):
        env = [f"{k}={v}" for k, v in self.env().items()]
        if self.uid != os.geteuid():
            return ["setpriv", f"--reuid={self.uid}", f"--regid={self.uid}", "--clear-groups",
                    "--inh-caps=-all", "env", "-i", *env, *argv]
        return ["env", "-i", *env, *argv]

    def policy(self, text):
        self.pols += 1
        p = f"{self.root}/policy-{self.pols}.toml"
        with open(p, "w") as f:
            f.write(text)
        if self.uid != os.geteuid():
            os.chown(p, self.uid, self.uid)
        return ["--policy", p]

    def cmd(self, script, flags=()):
        body = f"PROBE={self.probe}\n{PRELUDE}\n{script}"
        return self.as_user([self.vetto, "run", *flags, "--", "/bin/sh", "-c", body])

    def run(self, script, flags=(), timeout=120, stdin=subprocess.DEVNULL, cwd=None):
        p = subprocess.run(self.cmd(script, flags), cwd=cwd or self.proj, capture_output=True,
                           text=True, timeout=timeout, stdin=stdin)
        self.last = Run(p.returncode, p.stdout, p.stderr)
        return self.last

    def host(self, script, cwd=None):
        p = subprocess.run(self.as_user(["/bin/sh", "-c", script]), cwd=cwd or self.proj,
                           capture_output=True, text=True, timeout=60)
        return Run(p.returncode, p.stdout, p.stderr)

    def cleanup(self):
        shutil.rmtree(self.root, ignore_errors=True)


class FsOnly(Full):
    """`vetto run --tier fs-only`, as root or as nobody, in a fresh copy of the world. No
    namespaces: the attacks meet the host's own filesystem and processes, and only Landlock,
    seccomp and the dropped capabilities stand in the way. The project root holds secrets and
    protected paths, so it is list-only there; `scratch/` (nothing protected beneath) is a
    project directory the sandbox may fully write, for attacks that need to create a file."""

    tier = "fs-only"

    def fresh(self):
        super().fresh()
        os.makedirs(f"{self.proj}/scratch")
        if self.uid != os.geteuid():
            os.chown(f"{self.proj}/scratch", self.uid, self.uid)

    def cmd(self, script, flags=()):
        return super().cmd(script, ["--tier", "fs-only", *flags])

    def preflight(self):
        """Attack nothing unless the sandbox really is FS-ONLY with signals scoped: here a
        failed control hits the machine itself (P20 sends kill(-1, SIGKILL))."""
        self.fresh()
        host = subprocess.Popen(self.as_user(["sleep", "60"]))
        try:
            r = self.run(f"kill -0 {host.pid} 2>/dev/null && echo SIGNALLED; echo ran")
        finally:
            host.kill()
            host.wait()
            self.cleanup()
        m = re.search(r"^vetto: tier FS-ONLY, landlock ABI (\d+)", r.err, re.M)
        if not m or int(m.group(1)) < 6 or "ran" not in r.out or "SIGNALLED" in r.out:
            raise SystemExit(f"escape: refusing to run the fs-only attacks: the sandbox is not FS-ONLY "
                             f"with Landlock ABI >= 6 and signals scoped (rc {r.rc}, out {r.out!r}, err {r.err!r})")


class Shim:
    """Podman with vetto-shim as its runtime, every container hardened with the `default`
    policy (annotation dev.vetto.policy=default), the project bound at /workspace."""

    tier = "shim"
    mode = "root"

    def __init__(self, shim, template, listeners, work):
        self.template = template
        self.net = listeners
        self.uid = 0
        self.work = work
        vetto = os.path.join(os.path.dirname(shim), "vetto")
        self.audit = f"{work}/audit/audit.db"
        with open(f"{work}/shim.toml", "w") as f:
            f.write(f'[audit]\nstore = "{self.audit}"\n')
        os.makedirs(f"{work}/shimwrap")
        wrap = f"{work}/shimwrap/vetto-shim"
        with open(wrap, "w") as f:
            f.write(f"#!/bin/sh\nVETTO_SHIM_CONFIG={work}/shim.toml exec {shim} \"$@\"\n")
        os.chmod(wrap, 0o755)
        self.shim_bin = shim
        self.vetto_bin = vetto
        self.podman = ["podman", "--root", f"{work}/podman/root", "--runroot", f"{work}/podman/run",
                       "--storage-driver", "vfs", "--runtime", wrap, "--cgroup-manager", "cgroupfs",
                       "--events-backend", "file", "--tmpdir", f"{work}/podman/tmp"]
        rootfs = f"{work}/rootfs"
        for d in ["bin", "etc", "tmp", "proc", "sys", "dev", "root", "run", "workspace"]:
            os.makedirs(f"{rootfs}/{d}")
        shutil.copy(shutil.which("busybox"), f"{rootfs}/bin/busybox")
        applets = subprocess.run([f"{rootfs}/bin/busybox", "--list"], capture_output=True, text=True).stdout.split()
        for a in applets:
            if not os.path.exists(f"{rootfs}/bin/{a}"):
                os.symlink("busybox", f"{rootfs}/bin/{a}")
        shutil.copy(f"{template.t}/proj/escape-probe", f"{rootfs}/bin/escape-probe")
        with open(f"{rootfs}/etc/passwd", "w") as f:
            f.write("root:x:0:0:root:/root:/bin/sh\n")
        with open(f"{rootfs}/etc/group", "w") as f:
            f.write("root:x:0:\n")
        subprocess.run(["tar", "-C", rootfs, "-cf", f"{work}/rootfs.tar", "."], check=True)
        p = subprocess.run(self.podman + ["import", f"{work}/rootfs.tar", "localhost/vetto-escape:latest"],
                           capture_output=True, text=True)
        if p.returncode != 0:
            raise SystemExit(f"escape: podman import failed: {p.stderr}")
        hn = subprocess.run(["sh", "-c", "ulimit -Hn"], capture_output=True, text=True).stdout.strip()
        self.ulimits = ["--ulimit", f"nofile={hn}:{hn}", "--ulimit", "nproc=32768:32768"]

    def fresh(self):
        self.root = self.template.world()
        self.home = f"{self.root}/home"
        self.proj = f"{self.root}/proj"
        self.outside = f"{self.root}/outside"
        self.marker = f"{self.outside}/PWNED"
        self.probe = "/bin/escape-probe"
        self.inside_proj = "/workspace"
        self.vetto = self.shim_bin

    def policy(self, text):
        raise Escape("no policy files in the shim tier")

    def run(self, script, flags=(), timeout=120, stdin=subprocess.DEVNULL):
        body = f"PROBE={self.probe}\n{PRELUDE}\n{script}"
        argv = self.podman + ["run", "--rm", "--network", "none", *self.ulimits,
                              "--annotation", "dev.vetto.policy=default", "-e", f"GH_TOKEN={TOKEN}",
                              *flags, "-v", f"{self.proj}:/workspace", "-w", "/workspace",
                              "localhost/vetto-escape", "sh", "-c", body]
        p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, stdin=stdin)
        self.last = Run(p.returncode, p.stdout, p.stderr)
        return self.last

    def host(self, script, cwd=None):
        env = {"HOME": self.home, "PATH": "/usr/bin:/bin"}
        p = subprocess.run(["/bin/sh", "-c", script], cwd=cwd or self.proj, capture_output=True,
                           text=True, timeout=60, env=env)
        return Run(p.returncode, p.stdout, p.stderr)

    def cleanup(self):
        shutil.rmtree(self.root, ignore_errors=True)


# --- cases ------------------------------------------------------------------------------------

CASES = []


class Case:
    def __init__(self, cid, cls, attack, expect, tiers, fn):
        self.id, self.cls, self.attack, self.expect, self.tiers, self.fn = cid, cls, attack, expect, tiers, fn


def case(cid, cls, attack, expect, tiers=("full", "shim"), fs=None):
    """`expect`: what the tier must do, one text for all tiers or a dict tier -> text.
    `fs`: what FS-ONLY must do (its entry "fs-only" in the dict); "n/a: why" when the case
    cannot apply there, and then it is not run on that tier. Every case states one."""

    def deco(fn):
        e = dict(expect) if isinstance(expect, dict) else {t: expect for t in tiers}
        ts = tuple(tiers)
        if fs is not None:
            e["fs-only"] = fs
            if not fs.startswith("n/a"):
                ts += ("fs-only",)
        CASES.append(Case(cid, cls, attack, e, ts, fn))
        return fn

    return deco


def scratch(t, name):
    """Where a case creates NAME: the project root, or in FS-ONLY (whose project root is
    list-only) the fully writable scratch/ directory."""
    return f"scratch/{name}" if t.tier == "fs-only" else name


def _unreadable(t, script="", **paths):
    """FS-ONLY: after SCRIPT, reading each path is refused and no secret is printed."""
    r = t.run(script + "; ".join(f"t {n} 'cat {p}'" for n, p in paths.items()))
    _no_secret(r.out, r.err)
    return refused(r.out, *paths)


def host_git_runs_nothing(t):
    """The user's next git commands on the host, in the project and its repositories."""
    for d in [t.proj, f"{t.proj}/sub", f"{t.proj}/vendor/lib"]:
        r = t.host("git status --short >/dev/null 2>&1; git diff >/dev/null 2>&1; git log -1 >/dev/null 2>&1; echo done", cwd=d)
        need(r.out == "done\n", f"host git in {d}: {r.out} {r.err}")
    need(not os.path.exists(t.marker), "host git ran a command the sandbox planted")


def unchanged(t, rel, before):
    p = f"{t.proj}/{rel}"
    now = sha(p) if os.path.isfile(p) else None
    need(now == before, f"{rel} changed on the host")


def digest(t, rel):
    p = f"{t.proj}/{rel}"
    return sha(p) if os.path.isfile(p) else None


def _write_case(rel, cmd_tpl, flags=lambda t: []):
    def fn(t):
        before = digest(t, rel)
        r = t.run("t attempt " + shlex.quote(cmd_tpl.format(m=t.marker, f=rel)), flags=flags(t))
        obs = refused(r.out, "attempt")
        unchanged(t, rel, before)
        host_git_runs_nothing(t)
        return obs

    return fn


# 1. Trust handoff ------------------------------------------------------------------------------

PLANT = "printf '[core]\\n\\tfsmonitor = \"touch {m}\"\\n' >> {f}"
HOOK = "printf '#!/bin/sh\\ntouch {m}\\n' > {f} && chmod +x {f}"

for cid, rel, what, tpl, tiers in [
    ("T01", ".git/config", "append core.fsmonitor to the repository's .git/config", PLANT, ("full", "shim")),
    ("T02", ".git/hooks/post-checkout", "plant a post-checkout hook in .git/hooks", HOOK, ("full", "shim")),
    ("T03", ".git/commondir", "create .git/commondir pointing at a planted config", "echo ../.x > {f}", ("full", "shim")),
    ("T04", ".git/config.worktree", "create .git/config.worktree with core.fsmonitor", PLANT, ("full", "shim")),
    ("T05", "sub/.git", "rewrite a submodule's gitlink (sub/.git) to a planted git dir", "printf 'gitdir: ../.x\\n' > {f}", ("full", "shim")),
    ("T06", ".git/modules/sub/config", "append core.fsmonitor to a submodule's separate git dir", PLANT, ("full", "shim")),
    ("T07", "vendor/lib/.git/config", "append core.fsmonitor to a nested repository's config", PLANT, ("full", "shim")),
    ("T08", ".husky/pre-commit", "rewrite the hook that core.hooksPath points at (.husky)", HOOK, ("full", "shim")),
    ("T09", "shared.gitconfig", "append core.fsmonitor to a file the repository config includes", PLANT, ("full", "shim")),
    ("T10", ".vscode/tasks.json", "rewrite the editor's tasks (run on folder open)", "echo '{{\"tasks\":[]}}' > {f}", ("full", "shim")),
    ("T11", ".claude/settings.json", "widen the agent's own permission settings", "echo '{{\"permissions\":{{\"allow\":[\"Bash(*)\"]}}}}' > {f}", ("full", "shim")),
    ("T12", ".devcontainer/devcontainer.json", "add a postCreateCommand to the devcontainer definition", "echo '{{\"postCreateCommand\":\"touch {m}\"}}' > {f}", ("full", "shim")),
    ("T13", ".github/workflows/ci.yml", "rewrite a CI workflow", "echo 'on: pull_request_target' > {f}", ("full", "shim")),
    ("T14", "conf/vetto.toml", "widen the policy file this session was started with", "echo '[network]' >> {f}", ("full",)),
    ("T24", ".vscode/settings.json", "create editor settings inside an existing protected dir", "echo '{{\"terminal.integrated.shell.linux\":\"/tmp/x\"}}' > {f}", ("full", "shim")),
    ("T15", ".git/info/attributes", "plant a filter driver via .git/info/attributes", "echo '* filter=x' > {f}", ("full", "shim")),
    ("T16", ".git/HEAD", "point HEAD elsewhere (the next host checkout follows it)", "echo 'ref: refs/heads/x' > {f}", ("full", "shim")),
]:
    exp = "refused (read-only), file unchanged, host git runs nothing"
    fs = "refused (EACCES: read-only by Landlock, or its directory list-only), file unchanged, host git runs nothing"
    fl = (lambda t: ["--policy", f"{t.proj}/conf/vetto.toml"] if t.tier != "shim" else []) if cid == "T14" else (lambda t: [])
    case(cid, "trust handoff", what, exp, tiers, fs=fs)(_write_case(rel, tpl, fl))


def _rename_case(rel):
    def fn(t):
        pol = ["--policy", f"{t.proj}/conf/vetto.toml"] if rel == "conf" else []
        r = t.run(f"t rename 'mv {rel} {rel}.moved'; t rename_back 'ls -d {rel}'", flags=pol)
        obs = refused(r.out, "rename")
        need(os.path.exists(f"{t.proj}/{rel}") and not os.path.exists(f"{t.proj}/{rel}.moved"), f"{rel} moved")
        host_git_runs_nothing(t)
        return obs

    return fn


for cid, rel, what, tiers in [
    ("T17", ".git", "rename .git aside to plant a new one in its place", ("full", "shim")),
    ("T18", ".git/hooks", "rename .git/hooks aside", ("full", "shim")),
    ("T19", ".github", "rename .github (the parent of a protected workflows dir)", ("full",)),
    ("T20", "conf", "rename the parent directory of the policy file in use", ("full",)),
    ("T21", ".husky", "rename the hooksPath directory and plant another", ("full", "shim")),
]:
    case(cid, "trust handoff", what, "refused (EBUSY: a mount point), nothing moved", tiers,
         fs="refused (EACCES: its parent directory is list-only), nothing moved")(_rename_case(rel))


def _created_case(rel, content, reported=None):
    def fn(t):
        pol = t.policy('[filesystem]\nhandoff = "remove"\n')
        parent = os.path.dirname(rel)
        mk = f"mkdir -p {parent} && " if parent else ""
        r = t.run(f"t create '{mk}printf %s {content!r} > {rel}'", flags=pol)
        if t.tier == "fs-only":
            obs = refused(r.out, "create")
            need(not os.path.lexists(f"{t.proj}/{reported or rel}"), f"{reported or rel} created on the host")
            host_git_runs_nothing(t)
            return obs
        need(r.rc == 0, f"run failed: {r.err}")
        need(f"trust handoff: the sandbox created {t.proj}/{reported or rel}" in r.err, f"not reported: {r.err}")
        need(not os.path.exists(f"{t.proj}/{rel}"), f"{rel} left on the host")
        host_git_runs_nothing(t)
        return "created inside; reported and removed at exit"

    return fn


for cid, rel, what, content in [
    ("T22", ".mcp.json", "define an MCP server (absent at start)", '{"mcpServers":{"x":{"command":"touch"}}}'),
    ("T23", ".envrc", "create a direnv .envrc (absent at start)", "touch /tmp/pwned"),
    ("T25", ".cursor/mcp.json", "create agent MCP config in an absent protected dir (.cursor)", "{}"),
]:
    rep = ".cursor" if cid == "T25" else None
    case(cid, "trust handoff", what, 'created, reported at exit and removed (handoff = "remove")', ("full",),
         fs="refused (EACCES: the project root is list-only, nothing can be created in it); nothing left")(_created_case(rel, content, rep))


@case("T26", "trust handoff", "create a file the repository config includes but that was absent at start",
      'created, reported at exit and removed (handoff = "remove")', ("full",),
      fs="refused (EACCES: the project root is list-only, nothing can be created in it); nothing left")
def _(t):
    r = t.host("git config --add include.path ../later.gitconfig")
    need(r.rc == 0, f"setup: {r.err}")
    return _created_case("later.gitconfig", "[core]\n\tfsmonitor = touch /tmp/x\n")(t)


@case("T33", "trust handoff", "project is a linked worktree: rewrite its gitlink, or the main repository's config it points to",
      {"full": "refused (read-only); the main repository is outside and unchanged"}, ("full",),
      fs="refused (EACCES: the gitlink is read-only, the main repository outside the project); both unchanged")
def _(t):
    r = t.host("git worktree add -q ../outside/wt 2>&1 && echo added")
    need("added" in r.out, f"setup: {r.out} {r.err}")
    wt = f"{t.outside}/wt"
    cfg = f"{t.proj}/.git/config"
    before, link_before = sha(cfg), open(f"{wt}/.git").read()
    plant = PLANT.format(m=t.marker, f="$(sed -n 's/^gitdir: //p' .git)/../../config")
    r = t.run("t link " + shlex.quote("printf 'gitdir: /tmp/x\\n' > .git") + "; t main " + shlex.quote(plant), cwd=wt)
    obs = refused(r.out, "link", "main")
    need(open(f"{wt}/.git").read() == link_before and sha(cfg) == before, "worktree metadata changed")
    r2 = t.host("git status --short >/dev/null 2>&1; echo done", cwd=wt)
    need(r2.out == "done\n" and not os.path.exists(t.marker), "host git ran a planted command")
    return obs


def _setid(t, fn_names):
    r = t.run("$PROBE setid ./" + scratch(t, "setid-target"))
    obs = refused(r.out, *fn_names)
    found = []
    for dp, dns, fns in os.walk(t.proj):
        for n in dns + fns:
            p = os.path.join(dp, n)
            if not os.path.islink(p) and os.lstat(p).st_mode & 0o6000:
                found.append(p)
    need(not found, f"setid files on the host: {found}")
    return obs


for cid, names, what in [
    ("T27", ["chmod_suid", "chmod_sgid"], "set the setuid/setgid bit with chmod(2)"),
    ("T28", ["fchmod_suid"], "set the setuid bit with fchmod(2)"),
    ("T29", ["fchmodat_suid"], "set setuid+setgid with fchmodat(2)"),
    ("T30", ["fchmodat2_suid"], "set the setuid bit with fchmodat2(2) (Linux 6.6)"),
    ("T31", ["open_creat_suid", "mknod_suid", "mkdir_sgid"], "create setuid/setgid files and dirs by mode at creation (open, mknod, mkdir)"),
    ("T32", ["setxattr_capability"], "grant file capabilities (security.capability xattr)"),
]:
    case(cid, "trust handoff", what, "refused (EPERM); no setid file or capability on the host",
         fs="refused (EPERM" + ("/EOPNOTSUPP" if cid == "T32" else "") + "); no setid file or capability on the host")(
        (lambda names: lambda t: _setid(t, names))(names))


# 2. Secrets --------------------------------------------------------------------------------------


def _no_secret(out, err=""):
    need(SECRET not in out and SECRET not in err, "the secret was read")


@case("K01", "secrets", "read the project's .env", "masked: reads as empty", fs="refused (EACCES: no Landlock rule reaches it)")
def _(t):
    if t.tier == "fs-only":
        return _unreadable(t, read=".env")
    r = t.run("echo \"[$(cat .env)]\"")
    _no_secret(r.out)
    need("[]" in r.out, r.out + r.err)
    return "empty"


@case("K02", "secrets", "read .env through a symlink made inside", "masked: reads as empty",
      fs="refused (EACCES: Landlock checks the target, not the link)")
def _(t):
    if t.tier == "fs-only":
        obs = _unreadable(t, "ln -s ../.env scratch/s1 && ln -s $PWD/.env scratch/s2 || echo 'setup: no links'; ",
                          s1="scratch/s1", s2="scratch/s2")
        need("setup" not in results(t.last.out), f"no symlinks made: {t.last.out}")
        return obs
    r = t.run("ln -s .env s1 && ln -s $PWD/.env s2 && echo \"[$(cat s1)][$(cat s2)]\"")
    _no_secret(r.out)
    need("[][]" in r.out, r.out + r.err)
    return "empty"


@case("K03", "secrets", "hard-link .env to a new name and read it", "refused or empty; host .env intact",
      fs="refused (EACCES/EXDEV: Landlock refuses a link that would widen access), also into scratch/ and TMPDIR; host .env intact")
def _(t):
    if t.tier == "fs-only":
        r = t.run("t link 'ln .env hl'; t sub 'ln .env scratch/hl'; t tmp 'ln .env $TMPDIR/hl'; cat hl scratch/hl $TMPDIR/hl 2>/dev/null; true")
        _no_secret(r.out, r.err)
        need(open(f"{t.proj}/.env").read() == f"API_KEY={SECRET}\n", "host .env changed")
        return refused(r.out, "link", "sub", "tmp")
    r = t.run("t link 'ln .env hl'; cat hl 2>/dev/null; true")
    _no_secret(r.out)
    need(open(f"{t.proj}/.env").read() == f"API_KEY={SECRET}\n", "host .env changed")
    return results(r.out).get("link", "?")


@case("K04", "secrets", "read .env through /proc/self/root", "masked: reads as empty", fs="refused (EACCES)")
def _(t):
    if t.tier == "fs-only":
        return _unreadable(t, read="/proc/self/root$PWD/.env")
    r = t.run("echo \"[$(cat /proc/self/root$PWD/.env)]\"")
    _no_secret(r.out)
    return "empty"


@case("K05", "secrets", "read .env through /proc/1/root (the sandbox's init)", "refused or empty",
      fs="refused (EACCES: pid 1 is the host's init, outside the sandbox's Landlock domain)")
def _(t):
    if t.tier == "fs-only":
        return _unreadable(t, read="/proc/1/root$PWD/.env")
    r = t.run("echo \"[$(cat /proc/1/root$PWD/.env 2>&1)]\"")
    _no_secret(r.out)
    return r.out.strip()[-40:]


@case("K06", "secrets", "open_by_handle_at with the host file handle of .env", "refused (EPERM)", fs="refused (EPERM)")
def _(t):
    sh(f"'{t.template.t}/proj/escape-probe' mkhandle '{t.proj}/.env' '{t.proj}/handle.txt'")
    r = t.run("$PROBE handle handle.txt")
    _no_secret(r.out)
    return refused(r.out, "handle")


@case("K07", "secrets", "read ~/.ssh, ~/.aws/credentials, ~/.netrc", {"full": "not there (HOME is a private tmpfs)"}, ("full",),
      fs="refused (EACCES: HOME is neither listable nor readable, only its allowed dotfiles are)")
def _(t):
    if t.tier == "fs-only":
        r = t.run("t home 'ls -a ~'; t ssh 'cat ~/.ssh/id_ed25519'; t aws 'cat ~/.aws/credentials'; t netrc 'cat ~/.netrc'")
        _no_secret(r.out, r.err)
        return refused(r.out, "home", "ssh", "aws", "netrc")
    r = t.run(f"cat ~/.ssh/id_ed25519 ~/.aws/credentials ~/.netrc {t.home}/.netrc 2>&1; ls -a ~")
    _no_secret(r.out)
    return "absent"


@case("K08", "secrets", "read a secret inside an extra read root", {"full": "masked: reads as empty"}, ("full",),
      fs="refused (EACCES); the rest of the read root readable")
def _(t):
    pol = t.policy(f'[filesystem]\nread = ["{t.root}/shared"]\n[secrets]\nfiles = ["{t.root}/shared/token"]\n')
    if t.tier == "fs-only":
        r = t.run(f"t token 'cat {t.root}/shared/token'; echo \"[$(cat {t.root}/shared/readme)]\"", flags=pol)
        _no_secret(r.out, r.err)
        need("[shared]" in r.out, r.out + r.err)
        return refused(r.out, "token")
    r = t.run(f"echo \"[$(cat {t.root}/shared/token)][$(cat {t.root}/shared/readme)]\"", flags=pol)
    _no_secret(r.out)
    need("[][shared]" in r.out, r.out + r.err)
    return "empty"


@case("K09", "secrets", "list and write into a masked secret directory", {"full": "empty, read-only"}, ("full",),
      fs="refused (EACCES): neither listable nor writable")
def _(t):
    os.makedirs(f"{t.proj}/keys")
    open(f"{t.proj}/keys/k", "w").write(SECRET)
    if t.uid:
        sh(f"chown -R {t.uid} {t.proj}/keys")
    pol = t.policy('[secrets]\ndirs = ["keys"]\n')
    if t.tier == "fs-only":
        r = t.run("t read 'cat keys/k'; t write 'echo x > keys/new'; t list 'ls -A keys'", flags=pol)
        _no_secret(r.out)
        obs = refused(r.out, "read", "write")
        need(not results(r.out).get("list", "").startswith(SUCCESS),
             f"read, write: {obs}; but list: {results(r.out).get('list')} (the names in the masked directory are visible)")
        return obs
    r = t.run("echo \"[$(ls -A keys 2>&1)]\"; t write 'echo x > keys/new'", flags=pol)
    _no_secret(r.out)
    return refused(r.out, "write")


@case("K10", "secrets", "a secret created on the host after the sandbox started",
      {"full": "documented limit: readable (the scan runs at start; see threat model)"}, ("full",),
      fs="in the project root refused (EACCES: a name made after the start has no rule); in a fully granted "
         "subdirectory readable (the same documented limit); both refused in the next session")
def _(t):
    if t.tier == "fs-only":
        return _late_secret_fs(t)
    # The sandbox waits for the host to write .env.late, then reads it. This documents the
    # limit stated in the threat model: a later secret is not masked until the next session.
    p = subprocess.Popen(t.cmd("i=0; while [ ! -s .env.late ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done; cat .env.late"),
                         cwd=t.proj, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(1.0)
    with open(f"{t.proj}/.env.late", "w") as f:
        f.write("LATE=late-value\n")
    out, err = p.communicate(timeout=60)
    need("late-value" in out, f"expected the documented limit, got {out!r} {err!r}")
    # The next session masks it.
    r = t.run("echo \"[$(cat .env.late)]\"")
    need("[]" in r.out, r.out)
    return "readable this session, masked in the next"


@case("K11", "secrets", "read .env files at depth and through a symlinked parent dir", "masked: reads as empty",
      fs="refused (EACCES) by every path")
def _(t):
    if t.tier == "fs-only":
        return _unreadable(t, deep="deep/dir/.env", cfg="cfg/.env", real="realcfg/.env")
    r = t.run("echo \"[$(cat deep/dir/.env)][$(cat cfg/.env)][$(cat realcfg/.env)]\"")
    _no_secret(r.out)
    need("[][][]" in r.out, r.out + r.err)
    return "empty"


@case("K12", "secrets", "scan the environment for tokens and keys", "no secret variable passed", fs="no secret variable passed")
def _(t):
    r = t.run("env")
    need(TOKEN not in r.out and SECRET not in r.out, "a secret variable reached the sandbox")
    return "none passed"


@case("K13", "secrets", "scan /proc/*/environ and /proc/*/cmdline for a host process's token",
      "host processes invisible (PID namespace)",
      fs="host processes visible (no PID namespace); the environ of one of the same user refused (EACCES: Landlock's "
         "ptrace scope), no token read; its cmdline readable (documented residual)")
def _(t):
    if t.tier == "fs-only":
        return _host_environ_fs(t)
    host = subprocess.Popen(["sh", "-c", f"sleep 30 # {TOKEN}"], env={"GH_TOKEN": TOKEN, "PATH": "/usr/bin:/bin"})
    try:
        r = t.run("cat /proc/[0-9]*/environ /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' '\\n'; ls /proc | grep -c '^[0-9]'")
        need(TOKEN not in r.out, "a host process's token was read")
        return f"{r.out.strip().splitlines()[-1]} pids visible, no token"
    finally:
        host.kill()
        host.wait()


@case("K14", "secrets", "read /etc/shadow", "masked or unreadable", fs="refused (EACCES: a mask, gone around by Landlock)")
def _(t):
    if t.tier == "fs-only":
        return _unreadable(t, shadow="/etc/shadow", gshadow="/etc/gshadow")
    r = t.run("echo \"[$(cat /etc/shadow 2>/dev/null | head -c 40)]\"")
    need(re.search(r"root:[^:*!]{8,}", r.out) is None, "a password hash was read")
    return "empty"


@case("K15", "secrets", "overwrite or truncate the masked .env (destroy the host's secret)", "writes reach /dev/null; host .env intact",
      fs="refused (EACCES); host .env intact")
def _(t):
    if t.tier == "fs-only":
        r = t.run("t write 'echo pwn > .env'; t trunc ': > .env'; t rm 'rm -f .env'")
        need(open(f"{t.proj}/.env").read() == f"API_KEY={SECRET}\n", "host .env changed")
        return refused(r.out, "write", "trunc", "rm")
    r = t.run("t write 'echo pwn > .env'; t trunc ': > .env'; t rm 'rm -f .env'; echo \"[$(cat .env)]\"")
    need(open(f"{t.proj}/.env").read() == f"API_KEY={SECRET}\n", "host .env changed")
    need("[]" in r.out, r.out)
    return "write: " + results(r.out).get("write", "?") + " (to /dev/null), rm: " + results(r.out).get("rm", "?")


def _late_secret_fs(t):
    """K10 in FS-ONLY: the view is built at the start. A name the host creates afterwards in
    the list-only project root has no rule; one in a fully granted directory is readable."""
    p = subprocess.Popen(t.cmd("i=0; while [ ! -s scratch/.env.late ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done; "
                               "t root 'cat .env.late'; cat scratch/.env.late"),
                         cwd=t.proj, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(1.0)
    for rel in [".env.late", "scratch/.env.late"]:
        with open(f"{t.proj}/{rel}", "w") as f:
            f.write("LATE=late-value\n")
    out, err = p.communicate(timeout=60)
    root = refused(out, "root")
    need("late-value" in out, f"expected the documented limit in scratch/, got {out!r} {err!r}")
    nxt = _unreadable(t, root=".env.late", sub="scratch/.env.late")
    return f"root: {root}; scratch/: readable this session; next session: {nxt}"


def _host_environ_fs(t):
    """K13 in FS-ONLY: a host process of the sandbox's own user, with the token in its
    environment (and a marker, not the token, in its command line)."""
    host = subprocess.Popen(t.as_user(["sh", "-c", "sleep 30; : escape-cmdline-marker"]), start_new_session=True)
    try:
        r = t.run(f"cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n'; t environ 'cat /proc/{host.pid}/environ'; "
                  f"echo \"cmdline: $(tr '\\0' ' ' < /proc/{host.pid}/cmdline)\"; ls /proc | grep -c '^[0-9]'")
        need(TOKEN not in r.out, "a host process's token was read")
        obs = refused(r.out, "environ")
        seen = "escape-cmdline-marker" in results(r.out).get("cmdline", "")
        return f"{r.out.strip().splitlines()[-1]} pids visible; environ: {obs}; cmdline {'readable' if seen else 'not read'}"
    finally:
        os.killpg(host.pid, 9)
        host.wait()


# 3. Filesystem -----------------------------------------------------------------------------------


@case("F01", "filesystem", "write next to the project with ../", "nothing reaches the host (the parents are the sandbox's private /tmp)",
      fs="refused (EACCES: the host's own directories, outside every rule); nothing reaches the host")
def _(t):
    r = t.run("t up 'echo x > ../outside/PWNED'; t up2 'echo x > ../PWNED'; t dec 'echo x >> ../outside/decoy'")
    need(not os.path.exists(t.marker) and not os.path.exists(f"{t.root}/PWNED"), "wrote outside the project")
    need(open(f"{t.outside}/decoy").read() == "DECOY\n", "outside file written")
    if t.tier == "fs-only":
        return refused(r.out, "up", "up2", "dec")
    return ", ".join(f"{k}: {v}" for k, v in results(r.out).items())


@case("F02", "filesystem", "write system paths (/etc, /usr/bin, /root)", "refused (read-only)", fs="refused (EACCES)")
def _(t):
    r = t.run("t etc 'echo x > /etc/escape'; t usr 'echo x > /usr/bin/escape'; t root 'echo x > /root/escape'")
    need(not os.path.exists("/etc/escape") and not os.path.exists("/usr/bin/escape") and not os.path.exists("/root/escape"), "host system path written")
    return refused(r.out, "etc", "usr", "root")


@case("F03", "filesystem", "rename a project file onto a system path", "refused (EXDEV/EROFS)", fs="refused (EACCES)")
def _(t):
    r = t.run("t ren 'mv -T README /etc/escape-renamed'; t ren2 'python3 -c \"import os; os.rename(\\\"README\\\", \\\"/usr/escape\\\")\"' ")
    need(os.path.exists(f"{t.proj}/README") and not os.path.exists("/etc/escape-renamed"), "renamed out")
    return refused(r.out, "ren")


@case("F04", "filesystem", "hard-link a system file into the project, and a project file out", "refused", fs="refused (EACCES/EXDEV)")
def _(t):
    r = t.run("t in 'ln /etc/hostname hn'; t out 'ln README /etc/escape-link'")
    need(not os.path.exists("/etc/escape-link"), "linked out")
    return refused(r.out, "out")


@case("F05", "filesystem", "O_PATH descriptor of a read-only file reopened for writing via /proc/self/fd", "refused",
      fs="refused (EACCES: Landlock checks the reopen)")
def _(t):
    r = t.run("$PROBE reopen /etc/hostname; $PROBE reopen .git/config")
    return refused(r.out, "reopen")


@case("F18", "filesystem", "O_PATH descriptor of a read-only directory, then openat/mkdirat/symlinkat/linkat/renameat into it",
      "refused; nothing created there", fs="refused (EACCES); nothing created there")
def _(t):
    names = ["openat_creat", "mkdirat", "symlinkat", "linkat", "renameat"]
    r = t.run("$PROBE opathat /etc; $PROBE opathat .git")
    for d in ["/etc", f"{t.proj}/.git"]:
        need(not any(os.path.lexists(f"{d}/{n}") for n in ["escape-at", "escape-dir", "escape-link", "escape-hl", "escape-ren"]), f"created in {d}")
    return refused(r.out, *names)


@case("F06", "filesystem", "escape with ../../.. from the project to reach the host's / ", "sandbox root only",
      fs="the host's / (no mount namespace), but neither listable nor writable (EACCES)")
def _(t):
    if t.tier == "fs-only":
        r = t.run("cd ../../../../../..; t ls 'ls -A'; t w 'echo x > escape-root'")
        need(not os.path.exists("/escape-root"), "wrote the host's /")
        return refused(r.out, "ls", "w")
    r = t.run("cd ../../../../../..; ls -A; t w 'echo x > escape-root'")
    need("srv" not in r.out.split() and "var" not in r.out.split(), f"host root listed: {r.out}")
    return refused(r.out, "w")


@case("F07", "filesystem", "shared writable mmap of a read-only file", "refused (EACCES)", fs="refused (EACCES)")
def _(t):
    r = t.run("$PROBE mmapw /etc/hostname")
    return refused(r.out, "mmapw")


@case("F08", "filesystem", "shared writable mmap of a protected project file", "refused", fs="refused (EACCES)")
def _(t):
    before = digest(t, ".git/config")
    r = t.run("$PROBE mmapw .git/config")
    unchanged(t, ".git/config", before)
    return refused(r.out, "mmapw")


@case("F09", "filesystem", "write through a symlink made inside that points outside the project", "refused",
      fs="refused (EACCES: Landlock checks the target, not the link)")
def _(t):
    r = t.run(("cd scratch && " if t.tier == "fs-only" else "") + f"ln -s {t.outside}/decoy d && t w 'echo x > d'; ln -s /etc/passwd h && t w2 'echo x >> h'")
    need(open(f"{t.outside}/decoy").read() == "DECOY\n", "outside file written")
    return refused(r.out, "w", "w2")


@case("F10", "filesystem", "write /proc/sys and /sys", "refused (read-only)", fs="refused (EACCES: /proc and /sys read-only); the host's values unchanged")
def _(t):
    knobs = ["/proc/sys/kernel/sysrq", "/proc/sys/kernel/core_pattern", "/sys/kernel/uevent_helper"]
    before = [open(k).read() if os.path.exists(k) else None for k in knobs]
    r = t.run("t ps 'echo 1 > /proc/sys/kernel/sysrq'; t sys 'echo x > /sys/kernel/uevent_helper'; t core 'echo \"|/tmp/x\" > /proc/sys/kernel/core_pattern'")
    need([open(k).read() if os.path.exists(k) else None for k in knobs] == before, "a host kernel setting changed")
    return refused(r.out, "ps", "sys", "core")


@case("F11", "filesystem", "write the project when it is read-only (--project-access read)", {"full": "refused (EROFS)"}, ("full",),
      fs="refused (EACCES)")
def _(t):
    r = t.run("t w 'echo x >> README'; t c 'echo x > new'", flags=["--project-access", "read"])
    need(open(f"{t.proj}/README").read() == "hello\n" and not os.path.exists(f"{t.proj}/new"), "project written")
    return refused(r.out, "w", "c")


@case("F12", "filesystem", "delete and rename under write-no-delete", {"full": "refused (EACCES)"}, ("full",),
      fs="refused (EACCES), in the list-only project root and in a fully granted subdirectory")
def _(t):
    if t.tier == "fs-only":
        for n in ["a", "b"]:
            open(f"{t.proj}/scratch/{n}", "w").write(n)
            os.chown(f"{t.proj}/scratch/{n}", t.uid, t.uid)
        r = t.run("t rm 'rm README'; t mv 'mv Makefile M2'; t rm2 'rm scratch/a'; t mv2 'mv scratch/b scratch/c'",
                  flags=["--project-access", "write-no-delete"])
        need(os.path.exists(f"{t.proj}/scratch/a") and os.path.exists(f"{t.proj}/scratch/b"), "deleted in scratch/")
    else:
        r = t.run("t rm 'rm README'; t mv 'mv Makefile M2'", flags=["--project-access", "write-no-delete"])
    need(os.path.exists(f"{t.proj}/README") and os.path.exists(f"{t.proj}/Makefile"), "deleted")
    return refused(r.out, *(["rm", "mv", "rm2", "mv2"] if t.tier == "fs-only" else ["rm", "mv"]))


@case("F13", "filesystem", "see the host's /tmp, /run and /home", "private or absent",
      fs="refused (EACCES): /tmp, /dev/shm, /run and /home not granted (the session has a TMPDIR of its own)")
def _(t):
    tag = f"/tmp/vetto-escape-host-{os.getpid()}"
    open(tag, "w").write("host")
    try:
        if t.tier == "fs-only":
            r = t.run(f"t tmp 'cat {tag}'; t tmpls 'ls /tmp'; t shm 'ls /dev/shm'; t run 'ls /run'; t home 'ls /home'")
            return refused(r.out, "tmp", "tmpls", "shm", "run", "home")
        r = t.run(f"t tmp 'cat {tag}'; t run 'ls /run/docker.sock'; t home 'ls /home'")
        return refused(r.out, "tmp", "run")
    finally:
        os.unlink(tag)


@case("F14", "filesystem", "the Landlock rename erratum: move a directory out of a bind mount via a nested mount", "refused at the mount (EPERM)",
      fs="refused (EPERM: no user namespace, no mount); nothing moved")
def _(t):
    r = t.run("$PROBE sys userns_then_umount=. mount_bind=deep; t mv 'mv deep/dir /tmp/moved'")
    if t.tier == "fs-only":
        need(os.path.isdir(f"{t.proj}/deep/dir") and not os.path.lexists("/tmp/moved"), "deep/dir moved")
        return refused(r.out, "userns_then_umount", "mount_bind", "mv")
    return refused(r.out, "userns_then_umount", "mount_bind")


@case("F15", "filesystem", "create device nodes in the project", "refused (EPERM)", fs="refused (EPERM), in a writable project directory too")
def _(t):
    r = t.run(("cd scratch && " if t.tier == "fs-only" else "") + "$PROBE sys mknod_char mknod_block")
    need(not any(os.path.lexists(f"{t.proj}/{d}/{n}") for d in [".", "scratch"] for n in ["escape-mem", "escape-sda"]), "device node created")
    return refused(r.out, "mknod_char", "mknod_block")


@case("F16", "filesystem", "truncate a protected file with O_TRUNC", "refused; file intact", fs="refused (EACCES); file intact")
def _(t):
    before = digest(t, ".git/config")
    r = t.run("t tr ': > .git/config'; t tr2 'truncate -s 0 .git/config'")
    unchanged(t, ".git/config", before)
    return refused(r.out, "tr", "tr2")


@case("F17", "filesystem", "write the policy file and vetto's config/trust store", {"full": "refused / not reachable"}, ("full",),
      fs="refused (EACCES)")
def _(t):
    os.makedirs(f"{t.home}/.config/vetto", exist_ok=True)
    if t.uid:
        sh(f"chown -R {t.uid} {t.home}/.config")
    pol = ["--policy", f"{t.proj}/conf/vetto.toml"]
    r = t.run(f"t pol 'echo x >> conf/vetto.toml'; t trust 'echo {{}} > {t.home}/.config/vetto/trusted.json'", flags=pol)
    need(not os.path.exists(f"{t.home}/.config/vetto/trusted.json"), "trust store written")
    need(open(f"{t.proj}/conf/vetto.toml").read() == '[network]\nmode = "off"\n', "policy file written")
    return refused(r.out, *(["pol", "trust"] if t.tier == "fs-only" else ["pol"]))


# 4. Unmasking ----------------------------------------------------------------------------------


@case("U01", "unmasking", "umount the .env mask", "refused (EPERM)",
      fs="refused (EPERM); there is no mask to remove: .env stays unreadable (EACCES)")
def _(t):
    r = t.run("$PROBE sys umount=.env; echo \"[$(cat .env)]\"" + ("; t read 'cat .env'" if t.tier == "fs-only" else ""))
    _no_secret(r.out)
    return refused(r.out, *(["umount", "read"] if t.tier == "fs-only" else ["umount"]))


@case("U02", "unmasking", "umount a protected bind (.git) and /proc", "refused (EPERM)",
      fs="refused (EPERM); .git and /proc are the host's own, nothing is unmounted")
def _(t):
    r = t.run("$PROBE sys umount=.git umount_proc")
    return refused(r.out, "umount", "umount_proc")


@case("U03", "unmasking", "new mount API: fsopen, open_tree, move_mount, mount_setattr", "refused (EPERM)", fs="refused (EPERM)")
def _(t):
    r = t.run("$PROBE sys fsopen open_tree=.env move_mount=.env mount_setattr=.git")
    _no_secret(r.out)
    return refused(r.out, "fsopen", "open_tree", "move_mount", "mount_setattr")


@case("U04", "unmasking", "nested user namespace + mount namespace, then umount the mask",
      "the umount refused (EPERM) whatever the namespace; a nested user namespace itself is allowed (threat model)",
      fs="refused (EPERM): no new user namespace in FS-ONLY (unshare, clone; clone3 ENOSYS), so no umount either")
def _(t):
    if t.tier == "fs-only":
        r = t.run("$PROBE sys userns_then_umount=.env unshare_mnt unshare_user clone3_userns; t unshare 'unshare -Urm true'")
        _no_secret(r.out)
        return refused(r.out, "userns_then_umount", "unshare_mnt", "unshare_user", "clone3_userns", "unshare")
    r = t.run("$PROBE sys userns_then_umount=.env unshare_mnt; unshare -Urm sh -c 'umount -l .env; cat .env' 2>&1; $PROBE sys unshare_user")
    _no_secret(r.out)
    return refused(r.out, "userns_then_umount", "unshare_mnt") + "; unshare(CLONE_NEWUSER): " + results(r.out).get("unshare_user", "?")


@case("U05", "unmasking", "pivot_root; chroot into a subdirectory and climb out with ..",
      {"full": "refused (EPERM)", "shim": "pivot_root refused; chroot allowed by the bundle's CAP_SYS_CHROOT but the climb ends in the container's root"},
      fs="refused (EPERM/ENOENT: no capability, and the host's /tmp cannot be written)")
def _(t):
    r = t.run("$PROBE sys pivot_root chroot_escape")
    if t.tier == "fs-only":
        need(not os.path.lexists("/tmp/chroot-escape"), "created /tmp/chroot-escape on the host")
    return refused(r.out, "pivot_root", "chroot_escape")


@case("U06", "unmasking", "bind-mount over a mask, mount tmpfs/proc, remount / read-write", "refused (EPERM)", fs="refused (EPERM)")
def _(t):
    r = t.run("$PROBE sys mount_bind=.env mount_tmpfs=.git mount_proc mount_remount_rw")
    return refused(r.out, "mount_bind", "mount_tmpfs", "mount_proc", "mount_remount_rw")


@case("U07", "unmasking", "setns into the init's mount namespace", "refused",
      fs="refused (EACCES: pid 1 is the host's init, outside the Landlock domain)")
def _(t):
    r = t.run("$PROBE sys setns_mnt1")
    return refused(r.out, "setns_mnt1")


# 5. Process and kernel --------------------------------------------------------------------------


def _sys_case(cid, what, names, exp="refused (EPERM)", tiers=("full", "shim"), fs="refused (EPERM)"):
    @case(cid, "process and kernel", what, exp, tiers, fs=fs)
    def _(t):
        r = t.run("$PROBE sys " + " ".join(names))
        return refused(r.out, *[n.split("=")[0] for n in names])


_sys_case("P01", "ptrace the sandbox's init (PTRACE_ATTACH, PTRACE_SEIZE)", ["ptrace_attach1", "ptrace_seize1"], fs="refused (EPERM); pid 1 is the host's init here")
_sys_case("P02", "process_vm_readv of the init's memory", ["process_vm_readv1"], fs="refused (EPERM); pid 1 is the host's init here")
_sys_case("P03", "pidfd_getfd: steal the init's descriptors", ["pidfd_getfd1"], fs="refused (EPERM); pid 1 is the host's init here")
_sys_case("P04", "read the init's /proc/1/mem and /proc/1/environ", ["proc1_mem", "proc1_environ"], "refused (EACCES/EPERM)", ("full",),
          fs="refused (EACCES: Landlock's ptrace scope); pid 1 is the host's init here")
_sys_case("P05", "io_uring_setup (a syscall surface outside seccomp's view)", ["io_uring"])
_sys_case("P06", "userfaultfd (race amplifier)", ["userfaultfd"])
_sys_case("P07", "bpf(BPF_MAP_CREATE)", ["bpf"])
_sys_case("P08", "perf_event_open", ["perf_event_open"])
_sys_case("P09", "keyctl / add_key (the kernel keyring is not namespaced)", ["add_key", "keyctl"])
_sys_case("P10", "kexec_load and kexec_file_load", ["kexec_load", "kexec_file_load"])
_sys_case("P11", "load or unload a kernel module", ["init_module", "finit_module", "delete_module"])
_sys_case("P12", "x32 ABI syscalls (nr | 0x40000000)", ["x32_getpid", "x32_unshare", "x32_mount"], "refused (EPERM) or no such syscall",
          fs="refused (EPERM) or no such syscall")
_sys_case("P13", "i386 syscalls via int 0x80 (unshare, mount)", ["int80_unshare", "int80_mount"], "refused or the process killed (SIGSYS)",
          fs="refused or the process killed (SIGSYS)")
_sys_case("P14", "reboot, swapon, settimeofday, sethostname, acct", ["reboot", "swapon", "settimeofday", "acct"])
_sys_case("P15", "iopl and ioperm (raw port I/O)", ["iopl", "ioperm"])
_sys_case("P16", "open /dev/mem and /dev/kmsg", ["dev_mem", "dev_kmsg"], "absent (ENOENT) or refused",
          fs="refused (EACCES: not one of the granted devices)")
@case("P17", "process and kernel", "become root with setuid(0), then mount", "uid 0 or not, no capability: the mount is refused",
      fs="uid 0 or not, no capability: the mount is refused (EPERM)")
def _(t):
    r = t.run("$PROBE sys setuid0 mount_tmpfs=/tmp; su -c true root </dev/null 2>&1 | tail -1")
    return "setuid(0): " + results(r.out).get("setuid0", "?") + "; mount: " + refused(r.out, "mount_tmpfs")


# Capabilities a hardened process must never hold (docs/integrations.md lists the refused ones).
PRIVILEGED_CAPS = {"SYS_ADMIN": 21, "SYS_MODULE": 16, "SYS_RAWIO": 17, "SYS_PTRACE": 19, "SYS_BOOT": 22,
                   "SYS_TIME": 25, "DAC_READ_SEARCH": 2, "BPF": 39, "PERFMON": 38, "MAC_ADMIN": 33,
                   "MAC_OVERRIDE": 32, "SYSLOG": 34, "MKNOD": 27, "NET_ADMIN": 12, "NET_RAW": 13}


@case("P18", "process and kernel", "capabilities, no_new_privs and seccomp of the sandboxed process",
      {"full": "no capability at all; no_new_privs; seccomp filters on",
       "shim": "none of the privileged capabilities (the bundle's others stay); no_new_privs; two seccomp filters"},
      fs="no effective, permitted or ambient capability (root: bounding set cleared too; otherwise inert under no_new_privs); "
         "no_new_privs; seccomp filter on")
def _(t):
    r = t.run("grep -E '^(CapEff|CapPrm|CapBnd|CapAmb|NoNewPrivs|Seccomp|Seccomp_filters):' /proc/self/status")
    f = dict(l.split(":\t") for l in r.out.strip().splitlines() if ":\t" in l)
    need(f.get("NoNewPrivs") == "1" and f.get("Seccomp") == "2", f"status: {f}")
    if t.tier == "fs-only":
        zero = ["CapEff", "CapPrm", "CapAmb"] + (["CapBnd"] if t.uid == 0 else [])
        need(all(f.get(k) == "0000000000000000" for k in zero), f"capabilities: {f}")
        return "CapEff=CapPrm=CapAmb=0 " + ("CapBnd=0" if t.uid == 0 else f"CapBnd={f.get('CapBnd')}") + " NoNewPrivs=1 Seccomp=2"
    if t.tier == "full":
        need(f.get("CapEff") == "0000000000000000" and f.get("CapBnd") == "0000000000000000", f"capabilities: {f}")
        return f"CapEff=0 CapBnd=0 NoNewPrivs=1 Seccomp=2"
    held = [n for n, bit in PRIVILEGED_CAPS.items() for k in ("CapEff", "CapBnd", "CapAmb") if int(f.get(k, "0"), 16) >> bit & 1]
    need(not held, f"privileged capabilities held: {held} ({f})")
    need(f.get("Seccomp_filters") == "2", f"seccomp filters: {f}")
    return f"CapEff={f.get('CapEff')} (no privileged one) NoNewPrivs=1 Seccomp_filters=2"


# FS-ONLY: vetto's supervisor, a host process outside the sandbox, is the parent of the
# sandbox's reaper, which is the command's parent.
SUPERVISOR = r"""sup=$(sed -n 's/^PPid:[[:space:]]*//p' /proc/$PPID/status)
echo "supervisor: $(tr '\0\n' '  ' < /proc/$sup/cmdline | head -c 120)"
"""

# vetto's own pid is the front (shim/src/front.rs), the supervisor's parent: it exits with the
# status the supervisor writes on a pipe. The sandbox sees it too (FS-ONLY).
FRONT = r"""front=$(sed -n 's/^PPid:[[:space:]]*//p' /proc/$sup/status)
echo "front: $(tr '\0\n' '  ' < /proc/$front/cmdline | head -c 120)"
"""


@case("R06", "runtime", "find a runtime process inside the container to attack (its exe, fds, memory)",
      {"shim": "none: every process in the container is the container's own"}, ("shim",),
      fs="vetto's supervisor and its front (vetto's own pid, which exits with the status the supervisor sends it) "
         "are visible (no PID namespace), but their environ, memory, descriptors (open, link), signals and the "
         "supervisor's root, binary and fdinfo are refused (EACCES/EPERM)")
def _(t):
    if t.tier == "fs-only":
        before = sha(t.vetto)
        r = t.run(SUPERVISOR + "t environ 'cat /proc/$sup/environ'; t mem 'exec 3</proc/$sup/mem'; t exe 'exec 3>>/proc/$sup/exe'; "
                  "t root 'ls /proc/$sup/root/'; t signal 'kill -0 $sup'; "
                  "for n in 0 1 2 3 4 5 6 7 8 9; do t fd \"exec 3</proc/$sup/fd/$n\"; t link \"readlink -v /proc/$sup/fd/$n\"; "
                  "t info \"cat /proc/$sup/fdinfo/$n\"; done | sort | uniq")
        need(" run " in results(r.out).get("supervisor", ""), f"the supervisor was not found: {r.out}")
        need(TOKEN not in r.out and SECRET not in r.out, "the supervisor's environment was read")
        need(sha(t.vetto) == before, "the host runtime binary changed")
        reached = [l for l in r.out.splitlines() if l.endswith(": allowed")]
        need(not reached, f"reached: {reached}")
        found = refused(r.out, "environ", "mem", "exe", "root", "signal", "fd", "link", "info")
        # The front: its status pipe (one of its descriptors) would let the sandbox choose
        # vetto's exit status; its signals would let it end the session.
        r = t.run(SUPERVISOR + FRONT + "t fenviron 'cat /proc/$front/environ'; t fmem 'exec 3</proc/$front/mem'; "
                  "t fsignal 'kill -0 $front'; t fterm 'kill -TERM $front'; "
                  "for n in 0 1 2 3 4 5 6 7 8 9; do t ffd \"exec 3>/proc/$front/fd/$n\"; t flink \"readlink -v /proc/$front/fd/$n\"; "
                  "done | sort | uniq")
        need(" run " in results(r.out).get("front", ""), f"the front was not found: {r.out}")
        reached = [l for l in r.out.splitlines() if l.endswith(": allowed")]
        need(not reached, f"reached (front): {reached}")
        need(r.rc == 0, f"the session did not end as its command did (exit {r.rc}): {r.out}")
        return found + "; front: " + refused(r.out, "fenviron", "fmem", "fsignal", "fterm", "ffd", "flink")
    r = t.run("for p in /proc/[0-9]*; do echo \"$p $(tr '\\0' ' ' < $p/cmdline)\"; done")
    procs = [l for l in r.out.splitlines() if l.startswith("/proc/")]
    need(procs and all("vetto" not in l and "conmon" not in l and "runc" not in l for l in procs), r.out)
    return f"{len(procs)} processes, none of the runtime's"


@case("P19", "process and kernel", "TIOCSTI: push a command into the controlling terminal's input",
      {"full": "refused (EPERM); nothing reaches the host terminal"}, ("full",),
      fs="refused (EPERM); nothing reaches the host terminal")
def _(t):
    master, slave = pty.openpty()
    p = subprocess.Popen(t.cmd("$PROBE sys tiocsti tioclinux"), cwd=t.proj, stdin=slave, stdout=slave,
                         stderr=slave, close_fds=True)
    os.close(slave)
    buf = b""
    end = time.time() + 30
    while time.time() < end:
        rd, _, _ = select.select([master], [], [], 0.5)
        if rd:
            try:
                chunk = os.read(master, 4096)
            except OSError:
                break
            if not chunk:
                break
            buf += chunk
        elif p.poll() is not None:
            break
    p.wait(timeout=30)
    os.close(master)
    out = buf.decode(errors="replace").replace("\r", "")
    need("TIOCSTI-INJECTED\n" not in out.split("echo ", 1)[-1] or "tiocsti: allowed" not in out, f"injected: {out}")
    return refused(out, "tiocsti", "tioclinux")


@case("P20", "process and kernel", "signal a host process of the same user (kill by pid, kill -1)",
      "host process invisible and untouched",
      fs="host process visible (no PID namespace) but untouched: kill refused (EPERM: Landlock's signal scope)")
def _(t):
    if t.tier == "fs-only":
        # The sandbox's own user; kill(-1) only after a refused kill(pid) and kill(pid, 0):
        # with signals not scoped it would kill every process of this user on the machine.
        host = subprocess.Popen(t.as_user(["sleep", "60"]))
        script = (f"k=$($PROBE kill {host.pid}); echo \"$k\"; if [ \"$k\" = 'kill: EPERM' ] && ! kill -0 {host.pid} 2>/dev/null; "
                  "then $PROBE killall; else echo 'killall: skipped'; fi; echo after")
    else:
        host = subprocess.Popen(["sleep", "60"])
        script = f"$PROBE kill {host.pid}; $PROBE killall; echo after"
    try:
        r = t.run(script)
        time.sleep(0.3)
        need(host.poll() is None, "the host process was killed")
        if t.tier == "fs-only":
            return refused(r.out, "kill") + f"; kill(-1): {results(r.out).get('killall', '?')}, the host process untouched"
        return results(r.out).get("kill", "?")
    finally:
        host.kill()
        host.wait()


@case("P21", "process and kernel", "socket families beyond unix/inet/inet6/netlink (packet, raw, alg, key, bluetooth, xdp, tipc, rds, can, appletalk)",
      "refused (EPERM/EAFNOSUPPORT)", fs="refused (EPERM: every socket() is refused)")
def _(t):
    names = ["sock_packet", "sock_raw", "sock_alg", "sock_key", "sock_bluetooth", "sock_xdp", "sock_tipc", "sock_rds", "sock_can", "sock_appletalk"]
    r = t.run("$PROBE sys " + " ".join(names))
    return refused(r.out, *names)


# 6. Runtime --------------------------------------------------------------------------------------


@case("R01", "runtime", "overwrite the runtime binary through /proc/1/exe and /proc/self/exe (CVE-2019-5736 class)",
      "refused; host binary unchanged",
      fs="refused (EACCES: pid 1 is the host's init and vetto's supervisor a host process, both outside the Landlock "
         "domain); host binary unchanged")
def _(t):
    before = sha(t.vetto)
    if t.tier == "fs-only":
        r = t.run(SUPERVISOR + "$PROBE openw /proc/$sup/exe | sed s/^openw/sup_openw/; $PROBE reopen /proc/$sup/exe | sed s/^reopen/sup_reopen/; "
                  "$PROBE openw /proc/1/exe; $PROBE reopen /proc/1/exe")
        need(" run " in results(r.out).get("supervisor", ""), f"the supervisor was not found: {r.out}")
        need(sha(t.vetto) == before, "the host runtime binary changed")
        return refused(r.out, "sup_openw", "sup_reopen", "openw", "reopen")
    r = t.run("$PROBE openw /proc/1/exe; $PROBE reopen /proc/1/exe; $PROBE openw /proc/self/exe; ls -l /proc/1/exe 2>&1")
    need(sha(t.vetto) == before, "the host runtime binary changed")
    return refused(r.out, "openw", "reopen")


@case("R02", "runtime", "inherited descriptors and the cwd: walk .. from each to the host's root (CVE-2024-21626 class)",
      "no descriptor or cwd outside the sandbox",
      fs="no descriptor inherited beyond stdio (the cwd is on the host's own tree, no mount namespace: Landlock, not "
         "the root, confines: R02's walk up is refused at the first directory not granted)")
def _(t):
    if t.tier == "fs-only":
        r = t.run("$PROBE fdwalk")
        fds = [l for l in r.out.splitlines() if l.startswith("fd ")]
        need("fdwalk:" in r.out and all(int(l.split()[1]) <= 2 and "HOST ROOT" not in l for l in fds), f"inherited: {r.out}")
        return f"stdio only; walking up from the cwd: {'host root reached' if 'cwd: HOST ROOT' in r.out else 'no host root reached'}"
    r = t.run("$PROBE fdwalk")
    need("fdwalk: contained" in r.out, r.out + r.err)
    n = len([l for l in r.out.splitlines() if l.startswith("fd ")])
    return f"contained ({n} fds)"


@case("R03", "runtime", "swap a secret's parent directory with renameat2(RENAME_EXCHANGE) while sessions start (mask race)",
      {"full": "every session either refuses (changed since the scan) or runs with the secret masked; never readable"}, ("full",),
      fs="every session either refuses or runs with the secret unreadable; never readable")
def _(t):
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    os.makedirs(f"{t.proj}/deepx/dir")
    open(f"{t.proj}/deepx/dir/other", "w").write("other\n")
    if t.uid:
        sh(f"chown -R {t.uid} {t.proj}/deepx")
    stop = threading.Event()
    swaps = [0]
    # FS-ONLY's scan refuses a start while the swaps run back to back; paced at 1 ms they
    # also land between its scan and its Landlock rules (opened by path, later).
    pace = 0.001 if t.tier == "fs-only" else 0

    def swap():
        a, b = f"{t.proj}/deep".encode(), f"{t.proj}/deepx".encode()
        while not stop.is_set():
            # renameat2(AT_FDCWD, a, AT_FDCWD, b, RENAME_EXCHANGE)
            if libc.syscall(316, -100, a, -100, b, 2) == 0:
                swaps[0] += 1
            if pace:
                stop.wait(pace)

    mounts_before = open("/proc/self/mountinfo").read().count(t.root)
    th = threading.Thread(target=swap, daemon=True)
    th.start()
    outcomes = {}
    try:
        for _ in range(20):
            r = t.run("cat deep/dir/.env deepx/dir/.env 2>&1; echo read-done")
            _no_secret(r.out, r.err)
            k = "ran" if "read-done" in r.out else "refused"
            if k == "refused":
                need("masks and protected paths" in r.err or "secret scan" in r.err or "FS-ONLY: " in r.err
                     or "Landlock rule path" in r.err,
                     f"refused without naming the control: {r.err}")
            outcomes[k] = outcomes.get(k, 0) + 1
    finally:
        stop.set()
        th.join()
    need(swaps[0] > 100, f"only {swaps[0]} swaps")
    need(open("/proc/self/mountinfo").read().count(t.root) == mounts_before, "a mount was left on the host")
    return "20 sessions: " + ", ".join(f"{v} {k}" for k, v in sorted(outcomes.items())) + f" ({swaps[0]} swaps); secret never read"


@case("R04", "runtime", "open, read the link of, or read fdinfo of the init's descriptors (/proc/1/fd/N)", "refused (EACCES)", ("full",),
      fs="refused (EACCES: pid 1 is the host's init, outside the Landlock domain)")
def _(t):
    r = t.run("for n in 0 1 2 3 4 5 6 7 8 9 10; do $PROBE openw /proc/1/fd/$n; t link \"readlink -e /proc/1/fd/$n\"; t info \"cat /proc/1/fdinfo/$n\"; done | sort | uniq")
    res = [l for l in r.out.splitlines() if l.endswith(": allowed")]
    need(not res, f"reached: {res}")
    return refused(r.out, "openw", "link", "info")


@case("R05", "runtime", "tamper with the audit trail and find the control socket", {"full": "not reachable; the trail verifies"}, ("full",),
      fs="not reachable (EACCES or absent; every socket() refused); the trail verifies")
def _(t):
    r = t.run(f"t state 'ls {t.home}/.local/state/vetto'; t runtime 'ls {t.root}/run/vetto'; find / -name '*.sock' -o -name 'audit.db' 2>/dev/null | head")
    obs = refused(r.out, "state", "runtime")
    need(".sock" not in r.out.replace("t state", "") or "control" not in r.out, r.out)
    v = t.host(f"{t.vetto} audit verify")
    need(v.rc == 0, f"audit verify: {v.out} {v.err}")
    return obs + "; audit verify ok"


# 7. Lifetime --------------------------------------------------------------------------------------


def _gone(tag, secs=5):
    end = time.time() + secs
    want = f"sleep\0{tag}\0".encode()
    while time.time() < end:
        alive = False
        for pid in os.listdir("/proc"):
            if pid.isdigit():
                try:
                    if open(f"/proc/{pid}/cmdline", "rb").read() == want:
                        alive = True
                except OSError:
                    pass
        if not alive:
            return True
        time.sleep(0.1)
    return False


def _lifetime(cid, what, script, tiers=("full", "shim")):
    @case(cid, "lifetime", what, "killed when the session ends", tiers,
          fs="killed when the session ends (the sandbox's reaper kills every descendant)")
    def _(t):
        # Unique to this run: a stray process of an earlier run cannot pass for this one's.
        tag = f"{900000 + int(cid[1:]) * 10 + (1 if t.mode == 'rootless' else 0)}{os.getpid():07d}"
        r = t.run(script.replace("TAG", tag))
        need(_gone(tag), f"sleep {tag} outlived the session")
        return "gone after exit"


_lifetime("L01", "setsid: a new session leader in the background", "setsid sleep TAG >/dev/null 2>&1 & sleep 0.2; echo started")
_lifetime("L02", "double fork: an orphan reparented to init", "( (sleep TAG >/dev/null 2>&1 &) & ); sleep 0.2")
_lifetime("L03", "nohup and SIGHUP ignored", "nohup sleep TAG >/dev/null 2>&1 & sleep 0.2")
_lifetime("L04", "a process that ignores SIGTERM", "sh -c \"trap '' TERM HUP INT; sleep TAG\" >/dev/null 2>&1 & sleep 0.2")


@case("L05", "lifetime", "fork bomb against [limits].processes = 64", {"full": "stops at the limit (EAGAIN); the host is unaffected"}, ("full",),
      fs="stops at the limit (EAGAIN: a pids cgroup for root, RLIMIT_NPROC otherwise); the host is unaffected")
def _(t):
    pol = t.policy("[limits]\nprocesses = 64\n")
    r = t.run("$PROBE forkbomb 5000", flags=pol, timeout=120)
    m = re.search(r"forkbomb: (\d+) children, then (\w+)", r.out)
    need(m is not None, f"no limit hit: {r.out} {r.err}")
    need(int(m.group(1)) <= 64, f"{m.group(1)} children past a limit of 64")
    return f"{m.group(1)} children, then {m.group(2)}"


@case("L06", "lifetime", "memory exhaustion against [limits].memory = 256M", {"full": "allocation fails at the limit"}, ("full",),
      fs="allocation fails at the limit (RLIMIT_AS)")
def _(t):
    pol = t.policy('[limits]\nmemory = "256M"\n')
    r = t.run("$PROBE alloc 4096", flags=pol, timeout=120)
    m = re.search(r"alloc: (\d+) MiB", r.out)
    need(m is not None and int(m.group(1)) < 256, f"allocated past the limit: {r.out} {r.err}")
    return f"stopped at {m.group(1)} MiB"


@case("L07", "lifetime", "the supervisor killed with SIGKILL while the sandbox runs", {"full": "every sandboxed process dies with it"}, ("full",),
      fs="every sandboxed process dies with it (the sandbox's reaper gets a parent-death signal)")
def _(t):
    tag = f"{990000 + (1 if t.mode == 'rootless' else 0)}{os.getpid():07d}"
    p = subprocess.Popen(t.cmd(f"setsid sleep {tag} & sleep {tag}"), cwd=t.proj, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    want = f"sleep\0{tag}\0".encode()
    end = time.time() + 20
    seen = False
    while time.time() < end and not seen:
        for pid in os.listdir("/proc"):
            if pid.isdigit():
                try:
                    seen |= open(f"/proc/{pid}/cmdline", "rb").read() == want
                except OSError:
                    pass
        time.sleep(0.1)
    need(seen, "the sandboxed sleep never started")
    p.kill()
    p.wait()
    need(_gone(tag, 10), "sandboxed processes outlived the killed supervisor")
    return "all gone"


@case("L08", "lifetime", "outlive wall_clock with SIGTERM ignored", {"full": "killed at the limit"}, ("full",), fs="killed at the limit")
def _(t):
    tag = f"{991000 + (1 if t.mode == 'rootless' else 0)}{os.getpid():07d}"
    pol = t.policy('[limits]\nwall_clock = "2s"\n')
    start = time.time()
    r = t.run(f"trap '' TERM; sleep {tag}", flags=pol, timeout=60)
    took = time.time() - start
    need(took < 30 and r.rc != 0, f"ran {took:.1f}s rc={r.rc}")
    need(_gone(tag), "survived the wall clock")
    return f"killed, exit {r.rc}"


# 8. Network --------------------------------------------------------------------------------------

ALLOW = None  # set per run: a policy in allowlist mode with the loopback DNS stub


def _net_policy(t):
    return t.policy(
        "[network]\nmode = \"allowlist\"\n"
        f"allow = [\"allowed.test:{t.net.tcp4}\", \"allowed.test\"]\n"
        f"resolver = \"127.0.0.1:{t.net.dns}\"\n"
        "[approvals]\nmode = \"deny\"\n"
    )


NO_SOCKET = "refused (EPERM: every socket() is refused); nothing reaches the host"


def _net_case(cid, what, script, exp, tiers=("full", "shim"), allowlist=False, keys=("tcp4", "tcp6", "udp", "abstract"), names=(),
              fs=NO_SOCKET):
    @case(cid, "network", what, exp, tiers, fs=fs)
    def _(t):
        flags = _net_policy(t) if allowlist else []
        before = t.net.snapshot()
        s = script.format(p4=t.net.tcp4, p6=t.net.tcp6, pu=t.net.udp, pd=t.net.dns, ab=t.net.abstract_name,
                          run=f"{t.root}/run")
        r = t.run(s, flags=flags)
        time.sleep(0.2)
        after = t.net.snapshot()
        for k in keys:
            need(after[k] == before[k], f"{after[k] - before[k]} {k} connection(s)/packet(s) reached the host")
        return refused(r.out, *names) if names else r.out.strip()[-60:]


_net_case("N01", "TCP to a host listener on 127.0.0.1 (network off)", "$PROBE tcp 127.0.0.1 {p4}", "refused: the sandbox's loopback is its own", names=["tcp"])
_net_case("N02", "TCP to a host listener on ::1 (network off)", "$PROBE tcp ::1 {p6}", "refused", names=["tcp"])
_net_case("N03", "UDP to a host socket on 127.0.0.1", "$PROBE udp 127.0.0.1 {pu}", "zero packets reach the host", keys=("udp",))
_net_case("N04", "DNS: the system resolver and a direct query", "getent hosts escape.test; $PROBE udp 127.0.0.53 53; echo done",
          "zero packets out (counted on a loopback stub)", keys=("udp", "dns"))
_net_case("N05", "AF_VSOCK to the host (CID 2)", "$PROBE sys sock_vsock", "refused (EPERM)", names=["sock_vsock"])
_net_case("N06", "the host's abstract unix socket", "$PROBE abstract {ab}", "refused: abstract sockets are per network namespace", keys=("abstract",), names=["abstract"])
_net_case("N07", "the host's unix sockets by path (docker.sock, the approvals control socket)",
          "$PROBE unix /var/run/docker.sock; $PROBE unix /run/containerd/containerd.sock; $PROBE unix {run}/vetto/control.sock",
          "not there (ENOENT)", names=["unix"])
_net_case("N08", "add an address or route with netlink", "$PROBE sys netlink_addr", "refused (EPERM)", names=["netlink_addr"])


def _proxy_case(cid, what, line, proto="proxy"):
    @case(cid, "network", what, {"full": "refused by the broker (403 / SOCKS reply 2); nothing dialled"}, ("full",),
          fs="refused by the broker (403 / SOCKS reply 2); nothing dialled (the supervisor connects the "
             "sandbox's socket to the broker, announced)")
    def _(t):
        pol = _net_policy(t)
        before = t.net.snapshot()
        l = line.format(p4=t.net.tcp4, p6=t.net.tcp6)
        if proto == "proxy":
            r = t.run(f"$PROBE proxy 3128 {l!r}", flags=pol)
            res = results(r.out).get("proxy", "")
            need(" 403 " in res, f"not refused: {r.out} {r.err}")
        else:
            r = t.run(f"$PROBE socks 1080 {l}", flags=pol)
            res = results(r.out).get("socks", "")
            need(res.startswith("reply ") and res != "reply 0", f"not refused: {r.out} {r.err}")
        after = t.net.snapshot()
        need(after["tcp4"] == before["tcp4"] and after["tcp6"] == before["tcp6"], "the broker dialled a host listener")
        return res

    return _


_proxy_case("N09", "CONNECT to an IPv4 loopback literal", "CONNECT 127.0.0.1:{p4} HTTP/1.1")
_proxy_case("N10", "CONNECT to loopback in inet_aton forms (0x7f.1, 2130706433, 127.1, 017700000001)", "CONNECT 0x7f.1:{p4} HTTP/1.1")
_proxy_case("N11", "CONNECT to 2130706433 (integer form)", "CONNECT 2130706433:{p4} HTTP/1.1")
_proxy_case("N12", "CONNECT to [::1] and [::ffff:127.0.0.1]", "CONNECT [::ffff:127.0.0.1]:{p4} HTTP/1.1")
_proxy_case("N13", "CONNECT to localhost", "CONNECT localhost:{p4} HTTP/1.1")
_proxy_case("N14", "CONNECT with userinfo: allowed.test@127.0.0.1", "CONNECT allowed.test@127.0.0.1:{p4} HTTP/1.1")
_proxy_case("N15", "CONNECT to a name that merely ends in the allowed name", "CONNECT evilallowed.test:{p4} HTTP/1.1")
_proxy_case("N16", "CONNECT to the allowed name with a trailing-dot + suffix trick", "CONNECT allowed.test.127.0.0.1.nip.io:{p4} HTTP/1.1")
_proxy_case("N17", "DNS rebinding: an allowed name whose answer is 127.0.0.1 (stub resolver)", "CONNECT allowed.test:{p4} HTTP/1.1")
_proxy_case("N18", "absolute-form GET to a loopback literal", "GET http://127.0.0.1:{p4}/ HTTP/1.1")
_proxy_case("N19", "CONNECT to the allowed name on an unlisted port", "CONNECT allowed.test:{p6} HTTP/1.1")
_proxy_case("N20", "SOCKS5 CONNECT to 127.0.0.1 (address type 1)", "1 127.0.0.1 {p4}", proto="socks")
_proxy_case("N21", "SOCKS5 CONNECT to ::1 (address type 4)", "4 ::1 {p6}", proto="socks")
_proxy_case("N22", "SOCKS5 CONNECT by name to localhost", "3 localhost {p4}", proto="socks")
_proxy_case("N23", "SOCKS5 CONNECT to the allowed name answered with loopback (rebinding)", "3 allowed.test {p4}", proto="socks")
_proxy_case("N24", "CONNECT to an IPv4-compatible / NAT64 form of loopback", "CONNECT [64:ff9b::7f00:1]:{p4} HTTP/1.1")
_proxy_case("N25", "CONNECT with invisible characters in the name (allowed.test + U+200B)", "CONNECT allowed.test\u200b:{p4} HTTP/1.1")


@case("N26", "network", "raw TCP past the broker to the host's loopback (allowlist mode)",
      {"full": "refused: only the broker's listeners exist"}, ("full",),
      fs="refused: the supervisor answers a connect() to anything but the broker's advertised ports "
         "(ECONNREFUSED on loopback); UDP sockets are refused (EPERM)")
def _(t):
    pol = _net_policy(t)
    before = t.net.snapshot()
    r = t.run(f"$PROBE tcp 127.0.0.1 {t.net.tcp4}; $PROBE tcp ::1 {t.net.tcp6}; $PROBE udp 127.0.0.1 {t.net.udp}",
              flags=pol)
    after = t.net.snapshot()
    need(after["tcp4"] == before["tcp4"] and after["tcp6"] == before["tcp6"] and after["udp"] == before["udp"],
         "reached the host")
    return refused(r.out, "tcp")


PY_NET = """import socket, errno, sys
def t(n, f):
    try:
        f(); print(n + ': allowed')
    except OSError as e:
        print(n + ': ' + errno.errorcode.get(e.errno, str(e.errno)))
"""


def _fs_net_case(cid, what, body, exp, names):
    """A network attack only FS-ONLY can meet (its sandbox shares the host's network stack),
    written in Python (the host's python3 is in FS-ONLY's view), allowlist mode."""

    @case(cid, "network", what, {"full": "n/a: the sandbox's network namespace is its own"}, (), fs=exp)
    def _(t):
        pol = _net_policy(t)
        before = t.net.snapshot()
        src = PY_NET + body.format(p4=t.net.tcp4, p6=t.net.tcp6, pu=t.net.udp)
        r = t.run(f"python3 - <<'PYEOF'\n{src}\nPYEOF", flags=pol)
        time.sleep(0.2)
        after = t.net.snapshot()
        for k in ("tcp4", "tcp6", "udp"):
            need(after[k] == before[k], f"{after[k] - before[k]} {k} connection(s)/packet(s) reached the host")
        return refused(r.out, *names)

    return _


_fs_net_case("N27", "listen on the host's network: bind() a port, listen() with an automatic port (allowlist mode)",
             "t('bind', lambda: socket.socket().bind(('127.0.0.1', 0)))\n"
             "t('listen', lambda: socket.socket().listen(1))\n"
             "t('bind6', lambda: socket.socket(socket.AF_INET6).bind(('::', 0)))\n",
             "refused (EPERM): no bind() or listen() at all", ["bind", "listen", "bind6"])
_fs_net_case("N28", "TCP Fast Open: sendto(MSG_FASTOPEN) connects without connect() (allowlist mode)",
             "t('fastopen', lambda: socket.socket().sendto(b'x', 0x20000000, ('127.0.0.1', {p4})))\n"
             "t('fastopen6', lambda: socket.socket(socket.AF_INET6).sendto(b'x', 0x20000000, ('::1', {p6})))\n",
             "refused (EPERM)", ["fastopen", "fastopen6"])
_fs_net_case("N29", "the broker's real host port, learnt from getpeername(), dialled directly (allowlist mode)",
             "s = socket.create_connection(('127.0.0.1', 3128), 2)\n"
             "real = s.getpeername()[1]\n"
             "t('broker-real', lambda: socket.create_connection(('127.0.0.1', real), 2))\n"
             "t('broker-real6', lambda: socket.create_connection(('::ffff:127.0.0.1', real), 2))\n",
             "refused (ECONNREFUSED): only the advertised ports lead to the broker", ["broker-real", "broker-real6"])
_fs_net_case("N30", "sockets past seccomp's TCP-only rule: UDP, raw, SCTP, MPTCP, packet, netlink, unix (allowlist mode)",
             "t('udp', lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'x', ('127.0.0.1', {pu})))\n"
             "t('raw', lambda: socket.socket(socket.AF_INET, socket.SOCK_RAW, 17))\n"
             "t('sctp', lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM, 132))\n"
             "t('mptcp', lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM, 262))\n"
             "t('packet', lambda: socket.socket(17, socket.SOCK_RAW, 0))\n"
             "t('netlink', lambda: socket.socket(16, socket.SOCK_RAW, 0))\n"
             "t('unix', lambda: socket.socket(socket.AF_UNIX))\n",
             "refused (EPERM)", ["udp", "raw", "sctp", "mptcp", "packet", "netlink", "unix"])


missing = [c.id for c in CASES if "fs-only" not in c.expect]
assert not missing, f"cases without an FS-ONLY expectation: {missing}"


# --- running ----------------------------------------------------------------------------------


def build_probe(out):
    src = os.path.join(HERE, "probe.c")
    p = subprocess.run(["gcc", "-static", "-O1", "-o", out, src], capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"escape: cannot build the probe:\n{p.stderr}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tier", choices=["full", "fs-only", "shim"], default="full")
    ap.add_argument("--mode", choices=["root", "rootless"], default="root")
    ap.add_argument("--vetto", default=os.path.join(HERE, "../../target/debug/vetto"))
    ap.add_argument("--shim", default=os.path.join(HERE, "../../target/debug/vetto-shim"))
    ap.add_argument("--only", default="")
    ap.add_argument("--json", default="")
    ap.add_argument("--docs", nargs="*")
    ap.add_argument("--list", action="store_true")
    a = ap.parse_args()
    if a.list:
        for c in CASES:
            print(f"{c.id}\t{c.cls}\t{','.join(c.tiers)}\t{c.attack}")
        print(f"{len(CASES)} cases")
        return 0
    if a.docs is not None:
        return docs(a.docs)
    base = tempfile.mkdtemp(prefix="vetto-escape.", dir="/tmp")
    os.chmod(base, 0o755)
    try:
        probe = f"{base}/escape-probe"
        build_probe(probe)
        uid = NOBODY if a.mode == "rootless" and os.geteuid() == 0 else os.geteuid()
        tpl = Template(base, uid if a.tier in ("full", "fs-only") else 0, os.path.abspath(a.vetto), probe)
        net = Listeners()
        if a.tier == "full":
            tier = Full(a.mode, tpl, net)
            label = f"full/{a.mode}"
        elif a.tier == "fs-only":
            tier = FsOnly(a.mode, tpl, net)
            tier.preflight()
            label = f"fs-only/{a.mode}"
        else:
            os.makedirs(f"{base}/shimwork")
            tier = Shim(os.path.abspath(a.shim), tpl, net, f"{base}/shimwork")
            label = "shim/podman"
        only = set(x for x in a.only.split(",") if x)
        rows = []
        passed = failed = 0
        for c in CASES:
            if a.tier not in c.tiers or (only and c.id not in only):
                continue
            tier.fresh()
            tier.last = None
            t0 = time.time()
            try:
                obs = c.fn(tier)
                ok, detail = True, obs
            except Escape as e:
                last = getattr(tier, "last", None)
                ok, detail = False, str(e) + (f" [stderr: {last.err.strip()[-300:]}]" if last and last.err.strip() else "")
            except subprocess.TimeoutExpired as e:
                ok, detail = False, f"timed out: {e}"
            except Exception as e:  # a broken case is a failed case, not a crashed suite
                ok, detail = False, f"error in the case: {e!r}"
            finally:
                tier.cleanup()
            dt = time.time() - t0
            passed += ok
            failed += not ok
            rows.append({"id": c.id, "class": c.cls, "attack": c.attack, "expect": c.expect.get(a.tier, ""),
                         "ok": ok, "observed": detail})
            print(f"escape {label} {c.id} ... {'ok' if ok else 'FAILED'}  ({dt:.1f}s) {detail if not ok else ''}", flush=True)
        print()
        print(f"| case | class | outcome ({label}) |")
        print("|---|---|---|")
        for r in rows:
            print(f"| {r['id']} | {r['class']} | {'as expected' if r['ok'] else 'UNEXPECTED'}: {r['observed']} |")
        print()
        print(f"{passed} passed, {failed} failed")
        # cargo's summary shape, so `make test` counts these with the rest.
        print(f"test result: {'ok' if failed == 0 else 'FAILED'}. {passed} passed; {failed} failed")
        if a.json:
            with open(a.json, "w") as f:
                json.dump({"label": label, "rows": rows}, f, indent=1)
        return 1 if failed else 0
    finally:
        if a.tier == "shim":
            subprocess.run(["sh", "-c", f"grep -F ' {base}' /proc/self/mountinfo | awk '{{print $5}}' | sort -r | xargs -r -n1 umount -l"],
                           capture_output=True)
        shutil.rmtree(base, ignore_errors=True)


def docs(files):
    """The results table of docs/security-tests.md from the JSON of each run: FULL's and the
    shim's runs, then FS-ONLY's expectation and its runs."""
    runs = [json.load(open(f)) for f in files]
    labels = [r["label"] for r in runs]
    by = {r["label"]: {x["id"]: x for x in r["rows"]} for r in runs}
    fs = [l for l in labels if l.startswith("fs-only/")]
    other = [l for l in labels if l not in fs]
    head = ["Case", "Class", "Attack", "Expected (FULL)", *other, "Expected (shim)", "Expected (FS-ONLY)", *fs]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))

    def cell(c, l):
        x = by[l].get(c.id)
        if x is None:
            return "n/a"
        return ("pass: " if x["ok"] else "**FAIL**: ") + x["observed"].replace("|", "\\|").replace("\n", " ")

    for c in CASES:
        row = [c.id, c.cls, c.attack.replace("|", "/"), c.expect.get("full", "n/a"), *[cell(c, l) for l in other],
               c.expect.get("shim", "n/a"), c.expect.get("fs-only", "n/a"), *[cell(c, l) for l in fs]]
        print("| " + " | ".join(row) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
