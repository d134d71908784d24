//! The `vetto` command line (clap). Shell completions and the man page are generated from it.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

/// vetto: a sandbox for AI coding agents.
#[derive(Debug, Parser)]
#[command(name = "vetto", version, about, long_about = None)]
pub struct Cli {
    /// More log output (-v info, -vv debug, -vvv trace); RUST_LOG overrides.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    pub verbose: u8,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a command in the sandbox: `vetto run -- claude`.
    Run(RunArgs),
    /// Check, explain and describe policies.
    #[command(subcommand)]
    Policy(PolicyCommand),
    /// Record a policy file's SHA-256 as reviewed, so it may widen the sandbox.
    Trust {
        /// The policy file.
        file: PathBuf,
    },
    /// Read, check and export the audit trail.
    #[command(subcommand)]
    Audit(AuditCommand),
    /// Review mode's change sets (`--project-access review`): what a session wrote, held
    /// apart from the project until you apply it.
    #[command(subcommand)]
    Changes(ChangesCommand),
    /// Answer the network requests sessions are waiting on, and manage persistent grants and
    /// denials (from another terminal: the sandbox can never answer its own prompt).
    Approvals(ApprovalsArgs),
    /// A live view of running sessions, the audit trail's events and pending approvals, with
    /// one-key answers.
    Watch {
        /// The audit store to follow (default: yours).
        #[arg(long, value_name = "DB")]
        store: Option<PathBuf>,
    },
    /// List and show profiles: the base profiles, the built-in agent profiles, and yours
    /// (`$XDG_CONFIG_HOME/vetto/profiles/NAME.toml`).
    #[command(subcommand)]
    Profiles(ProfilesCommand),
    /// Probe this machine and report which sandbox tier it supports.
    Doctor {
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
        /// Skip the self-test sandbox.
        #[arg(long)]
        no_selftest: bool,
    },
    /// Print shell completions.
    Completions {
        /// bash, zsh, fish, elvish or powershell.
        shell: clap_complete::Shell,
    },
    /// Inside the sandbox: relay stdin/stdout to HOST:PORT through the network broker
    /// (`ssh -o ProxyCommand='vetto connect %h %p'`).
    Connect {
        /// Destination host name (resolved by the broker, outside the sandbox).
        host: String,
        /// Destination port.
        port: u16,
    },
    /// Internal: the network broker sidecar (started by `vetto run`).
    #[command(hide = true, name = "__broker")]
    Broker,
    /// Write man pages into a directory.
    #[command(hide = true)]
    Man {
        /// Output directory.
        #[arg(long, default_value = "man")]
        out: PathBuf,
    },
}

/// `vetto audit` subcommands. `--store` is the SQLite database (default:
/// `$XDG_STATE_HOME/vetto/audit/audit.db`; `vetto-shim`'s is `/var/lib/vetto/audit/audit.db`).
#[derive(Debug, Subcommand)]
pub enum AuditCommand {
    /// Check the whole chain, every signed checkpoint and the signed head; say where it
    /// breaks. Exit 0 if intact, 1 if not.
    Verify {
        /// The store.
        #[arg(long, value_name = "DB")]
        store: Option<PathBuf>,
        /// The key to verify with: the store's `audit.key`, or its public half `audit.pub`
        /// (default: the one beside the store, else yours).
        #[arg(long, value_name = "FILE")]
        key: Option<PathBuf>,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// Print events, oldest first.
    Query {
        /// The store.
        #[arg(long, value_name = "DB")]
        store: Option<PathBuf>,
        /// Only events at or after this time (RFC 3339, or a duration back: 10m, 2h, 7d).
        #[arg(long, value_name = "WHEN")]
        since: Option<String>,
        /// Only this session's.
        #[arg(long, value_name = "ID")]
        session: Option<String>,
        /// Only this kind (session_start, session_end, connection, refusal, limit, approval_*, changes).
        #[arg(long, value_name = "KIND")]
        kind: Option<String>,
        /// One JSON object per line (the event, its `prev` and `hash`).
        #[arg(long)]
        json: bool,
        /// At most this many.
        #[arg(long, value_name = "N")]
        limit: Option<u64>,
    },
    /// List sessions: start, end, connections allowed and denied, command.
    Sessions {
        /// The store.
        #[arg(long, value_name = "DB")]
        store: Option<PathBuf>,
        /// One JSON object per line.
        #[arg(long)]
        json: bool,
    },
    /// Send every event an OpenTelemetry collector has not acknowledged (exit 1 if some are
    /// still pending).
    Export {
        /// The store.
        #[arg(long, value_name = "DB")]
        store: Option<PathBuf>,
        /// The collector's OTLP/HTTP logs endpoint (`http://127.0.0.1:4318/v1/logs`).
        #[arg(long, value_name = "URL")]
        otlp: String,
    },
}

/// `vetto approvals`: with no subcommand, list pending requests.
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = false)]
pub struct ApprovalsArgs {
    /// Also list this session's answers, persistent grants and denials, and sessions.
    #[arg(long, global = true)]
    pub all: bool,
    /// Machine-readable output (list).
    #[arg(long, global = true)]
    pub json: bool,
    /// Work on `vetto-shim`'s store (/var/lib/vetto/audit/approvals.db) instead of yours:
    /// parked requests and persistent rules of containers (whose prompts nobody answers live).
    #[arg(long, global = true)]
    pub shim: bool,
    /// The approvals store to work on (it lives beside an audit store, which records the
    /// answers given here); implies --shim's behaviour of not asking live sessions.
    #[arg(long, global = true, value_name = "DB", conflicts_with = "shim")]
    pub store: Option<PathBuf>,
    /// What to do (default: list).
    #[command(subcommand)]
    pub command: Option<ApprovalsCommand>,
}

/// `vetto approvals` subcommands.
#[derive(Debug, Subcommand)]
pub enum ApprovalsCommand {
    /// List pending requests (and parked ones; with --all, every answer and rule).
    List {
        /// Everything: session answers, persistent rules, sessions.
        #[arg(long)]
        all: bool,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// Let a pending request through: this once (default), for the session, or always
    /// (persisted for this project). A parked request takes only --always.
    Grant {
        /// The request's id.
        id: String,
        /// Only the connections waiting now.
        #[arg(long, conflicts_with_all = ["session", "always"])]
        once: bool,
        /// For the rest of the session.
        #[arg(long, conflicts_with = "always")]
        session: bool,
        /// For every later session of this project too.
        #[arg(long)]
        always: bool,
        /// Grant this wider destination instead (`*.example.com:443`); it must cover the
        /// request. Only with --session or --always.
        #[arg(long, value_name = "HOST[:PORT]")]
        dest: Option<String>,
    },
    /// Refuse a pending request (for the rest of the session), or always (persisted).
    Deny {
        /// The request's id.
        id: String,
        /// For every later session of this project too.
        #[arg(long)]
        always: bool,
        /// Deny this wider destination instead (with --always).
        #[arg(long, value_name = "HOST[:PORT]")]
        dest: Option<String>,
    },
    /// Withdraw a persistent grant or denial, or a session's answer.
    Revoke {
        /// The rule's or answer's id (`vetto approvals list --all`).
        id: String,
    },
    /// Stay attached to every session (so they ask rather than park) and print each pending
    /// request as a line: `pending ID SESSION DESTINATION`.
    Follow,
}

/// Audit flags of `vetto run`.
#[derive(Debug, Clone, Default, Args)]
pub struct AuditArgs {
    /// Also append every audit event as JSON lines to FILE (outside everything the sandbox
    /// can read or write); overrides `audit.jsonl`.
    #[arg(long, value_name = "FILE")]
    pub audit_jsonl: Option<String>,
    /// Also send every audit event to an OpenTelemetry collector (OTLP/HTTP logs endpoint,
    /// `http://…/v1/logs`); overrides `audit.otlp`.
    #[arg(long, value_name = "URL")]
    pub audit_otlp: Option<String>,
    /// Write a JSON report of the session to FILE at exit.
    #[arg(long, value_name = "FILE")]
    pub report: Option<PathBuf>,
    /// Print a one-screen summary on stderr at exit: what was denied and why, bytes out per
    /// destination.
    #[arg(long)]
    pub summary: bool,
    /// Do not record this session in the audit store.
    #[arg(long, conflicts_with_all = ["audit_jsonl", "audit_otlp", "report", "summary"])]
    pub no_audit: bool,
}

/// Policy subcommands.
#[derive(Debug, Subcommand)]
pub enum PolicyCommand {
    /// Parse and resolve a policy; report the first error with file, line and column.
    Check {
        /// The policy file (default: the user file and --policy).
        file: Option<PathBuf>,
        #[command(flatten)]
        policy: PolicyArgs,
    },
    /// Print every mount, mask, env var, Landlock rule and syscall that would apply, and where
    /// each came from.
    Explain {
        /// Machine-readable output (includes the OCI config.json and the init plan).
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        policy: PolicyArgs,
    },
    /// Print the JSON Schema of the policy file.
    Schema,
    /// Write the vetto policy equivalent to another sandbox's settings: Anthropic's
    /// sandbox-runtime settings JSON, Claude Code's settings.json (`sandbox`, `permissions`) or
    /// Codex's config.toml; every field it could not map is named.
    Import {
        /// The settings file.
        file: PathBuf,
        /// Write the policy here (refused if it exists) instead of to stdout.
        #[arg(long, value_name = "FILE")]
        out: Option<PathBuf>,
    },
    /// Print a built-in profile's TOML.
    Show {
        /// default, read-only or ci.
        profile: String,
    },
}

/// `vetto changes` subcommands.
#[derive(Debug, Subcommand)]
pub enum ChangesCommand {
    /// Every change set; with an ID, its entries (trust-handoff paths first, then refused ones).
    List {
        /// A change set.
        id: Option<String>,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// A unified diff of a change set (text files), a line for everything else.
    Diff {
        /// The change set.
        id: String,
        /// Only these paths (relative to the project, or absolute inside it) and what is below.
        paths: Vec<String>,
    },
    /// Apply a change set, or some of its paths, to the project.
    Apply {
        /// The change set.
        id: String,
        /// Only these paths and what is below them.
        paths: Vec<String>,
        /// Apply paths the project changed since the session started (never refused entries).
        #[arg(long)]
        force: bool,
        /// Apply trust-handoff paths too (git metadata, editor and agent settings, MCP files).
        #[arg(long)]
        include_handoff: bool,
        /// Apply a change set last used before the system restarted (its last session's writes
        /// were not synced: after a crash, files in it may be incomplete; read the diff first).
        #[arg(long)]
        accept_unsynced: bool,
        /// Do not record the apply in the audit trail (recorded by default: nothing is applied
        /// when it cannot be).
        #[arg(long)]
        no_audit: bool,
    },
    /// Delete a change set.
    Discard {
        /// The change set.
        id: String,
        /// Do not record the discard in the audit trail (recorded by default: nothing is
        /// removed when it cannot be).
        #[arg(long)]
        no_audit: bool,
    },
}

/// `vetto profiles` subcommands.
#[derive(Debug, Subcommand)]
pub enum ProfilesCommand {
    /// Every profile, a line each: its kind, name and what it is for.
    List,
    /// A profile's TOML (for your own agent profile: the built-in one it extends, then it).
    Show {
        /// The profile's name.
        name: String,
    },
}

/// Everything that selects and layers a policy.
#[derive(Debug, Clone, Default, Args)]
pub struct PolicyArgs {
    /// Policy file, layered over the built-in profile and the user file.
    #[arg(long, value_name = "FILE")]
    pub policy: Option<PathBuf>,
    /// Built-in profile: default, read-only, ci.
    #[arg(long, value_name = "NAME")]
    pub profile: Option<String>,
    /// Project directory (default: the current directory).
    #[arg(long, value_name = "DIR")]
    pub project: Option<PathBuf>,
    /// Project access: read, write, write-no-delete, or review (writes are held in a change
    /// set until you apply them: `vetto changes`).
    #[arg(long, value_name = "LEVEL")]
    pub project_access: Option<String>,
    /// Extra read-only root (repeatable).
    #[arg(long, value_name = "PATH")]
    pub allow_read: Vec<String>,
    /// Extra read-write root (repeatable).
    #[arg(long, value_name = "PATH")]
    pub allow_write: Vec<String>,
    /// Pass this environment variable through (exact name, repeatable).
    #[arg(long, value_name = "NAME")]
    pub pass_env: Vec<String>,
    /// Wall-clock limit for the session, e.g. 30m.
    #[arg(long, value_name = "DURATION")]
    pub wall_clock: Option<String>,
    /// Network: `off`, `allow:HOST[,HOST...]` or `strict:HOST[,HOST...]` (hosts as in
    /// `network.allow`: `crates.io`, `*.npmjs.org`, `github.com:22`).
    #[arg(long, value_name = "MODE[:HOSTS]")]
    pub net: Option<String>,
    /// Ignore the user policy file.
    #[arg(long)]
    pub no_user_policy: bool,
    /// Agent profile layered over the base profile: claude, codex, aider, gemini, opencode,
    /// or your own (`$XDG_CONFIG_HOME/vetto/profiles/NAME.toml`); `none` for none. Default:
    /// the command's name when it is one of the built-in agents (`vetto run claude`).
    #[arg(long, value_name = "NAME")]
    pub agent: Option<String>,
    /// Make a toolchain's package cache writable: cargo, npm, pip, go, maven, gradle
    /// (repeatable; its registries: `--net allow:@cargo`).
    #[arg(long, value_name = "NAME")]
    pub cache: Vec<String>,
    /// Set by `vetto run` (not a flag): where the command is installed, when the sandbox
    /// would not see it otherwise (read-only roots, named in the session's policy as the
    /// command's installation).
    #[arg(skip)]
    pub command_install: Vec<String>,
}

/// `vetto run`.
#[derive(Debug, Clone, Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub policy: PolicyArgs,
    #[command(flatten)]
    pub audit: AuditArgs,
    /// Make git use ssh through the broker (`GIT_SSH_COMMAND` with `vetto connect`); the
    /// host:22 must still be on the allowlist.
    #[arg(long)]
    pub git_ssh: bool,
    /// Nobody will answer: a destination that would ask is refused at once and parked, for
    /// `vetto approvals grant ID --always` to let a later run through (as the `ci` profile).
    #[arg(long)]
    pub unattended: bool,
    /// The sandbox tier: `auto` (FULL where a probe sandbox can be created, else FS-ONLY
    /// where Landlock and seccomp work, else refuse), `full`, or `fs-only`.
    #[arg(long, value_enum, default_value = "auto")]
    pub tier: crate::tier::TierChoice,
    /// Do not print the tier line (`vetto: tier FULL, landlock ABI 7`) on stderr.
    #[arg(short, long)]
    pub quiet: bool,
    /// Continue on review mode's change set ID (the sandbox sees its earlier writes); implies
    /// `--project-access review`.
    #[arg(long, value_name = "ID")]
    pub resume: Option<String>,
    /// The command and its arguments (`vetto run claude`, or after `--`).
    #[arg(trailing_var_arg = true, required = true, value_name = "CMD")]
    pub command: Vec<String>,
}

/// The command line, parsed. `vetto run …` (the command every session starts with) is parsed
/// first by a command that holds `run` alone: clap builds the whole command tree before it
/// matches anything, and building every subcommand's arguments was ~0.2 ms of a session's
/// start (their code runs once per process, so it is all first-time cost: page faults and
/// cold caches). Anything that one does not accept as a `run` (another subcommand, an error,
/// `--help`, `--version`, `-v` before `run`) is parsed again by the full command, so what is
/// printed and how errors read is unchanged; what it does accept, it parses as the full
/// command would (`tests::run_alone_parses_as_the_full_command_does`).
pub fn parse() -> Cli {
    let argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
    parse_run(&argv).unwrap_or_else(|| Cli::parse_from(argv))
}

/// `argv` parsed by the `run`-only command, or `None` where the full command must decide.
fn parse_run(argv: &[std::ffi::OsString]) -> Option<Cli> {
    if argv.get(1).map(|a| a.as_os_str()) != Some("run".as_ref()) {
        return None;
    }
    let only = RunOnly::try_parse_from(argv).ok()?;
    let RunOnlyCommand::Run(run) = only.command;
    Some(Cli {
        verbose: only.verbose,
        command: Command::Run(run),
    })
}

/// [`Cli`] with `run` as its only subcommand (see [`parse`]).
#[derive(Debug, Parser)]
#[command(name = "vetto", version, about, long_about = None)]
struct RunOnly {
    /// More log output (-v info, -vv debug, -vvv trace); RUST_LOG overrides.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    verbose: u8,
    #[command(subcommand)]
    command: RunOnlyCommand,
}

/// [`Command`]'s `run`, alone.
#[derive(Debug, Subcommand)]
enum RunOnlyCommand {
    /// Run a command in the sandbox: `vetto run -- claude`.
    Run(RunArgs),
}

#[cfg(test)]
mod tests {
    use std::ffi::OsString;

    use clap::CommandFactory;

    use super::*;

    fn argv(line: &str) -> Vec<OsString> {
        line.split_whitespace().map(OsString::from).collect()
    }

    /// Everything `run` takes, in valid and invalid combinations, and other subcommands.
    const LINES: &[&str] = &[
        "vetto run -- /bin/true",
        "vetto run /bin/true",
        "vetto run -v -- claude --resume",
        "vetto run -vv --quiet -- make test",
        "vetto -v run -- true",
        "vetto run --no-user-policy --no-audit -- true",
        "vetto run --tier fs-only -- true",
        "vetto run --tier bogus -- true",
        "vetto run --project-access review -- true",
        "vetto run --project-access read-only -- true",
        "vetto run --resume abc -- true",
        "vetto run --git-ssh --unattended -- git fetch",
        "vetto run --policy p.toml --profile ci -- true",
        "vetto run --agent claude -- claude",
        "vetto run --summary --report r.json -- true",
        "vetto run --net allowlist:example.com --allow-read /etc --allow-write /tmp/x -- curl",
        "vetto run --pass-env A --pass-env B --wall-clock 5m --cache cargo --project /tmp -- env",
        "vetto run --audit-jsonl - --no-audit -- true",
        "vetto run --quiet --quiet -- true",
        "vetto run --tier",
        "vetto run --no-such-flag -- true",
        "vetto run",
        "vetto run --",
        "vetto run --help",
        "vetto run -h",
        "vetto run --version",
        "vetto run -- --help",
        "vetto run true --tier fs-only",
        "vetto --version",
        "vetto policy explain",
        "vetto doctor --json",
        "vetto",
    ];

    /// The `run`-only command accepts what the full one accepts, parsed the same, and leaves
    /// everything else (errors, help, version, other subcommands) to the full command.
    #[test]
    fn run_alone_parses_as_the_full_command_does() {
        let mut fast = 0;
        for line in LINES {
            let a = argv(line);
            let full = Cli::try_parse_from(&a);
            match parse_run(&a) {
                Some(cli) => {
                    fast += 1;
                    let full = full.unwrap_or_else(|e| {
                        panic!("{line}: the run-only parse accepted what the full one refuses: {e}")
                    });
                    assert_eq!(format!("{cli:?}"), format!("{full:?}"), "{line}");
                }
                None => {
                    if let Ok(full) = full {
                        assert!(
                            !matches!(full.command, Command::Run(_))
                                || !line.starts_with("vetto run"),
                            "{line}: a valid `run` line fell back to the full parse"
                        );
                    }
                }
            }
        }
        assert!(fast >= 10, "only {fast} lines took the run-only parse");
    }

    /// Both commands describe `run` identically: its help text (every argument, its value
    /// names, defaults and conflicts, as clap renders them) is the same.
    #[test]
    fn run_alone_has_the_full_commands_arguments() {
        let mut full = Cli::command();
        let mut only = RunOnly::command();
        full.build();
        only.build();
        let help = |c: &mut clap::Command| {
            c.find_subcommand_mut("run")
                .expect("a run subcommand")
                .render_long_help()
                .to_string()
        };
        assert_eq!(help(&mut only), help(&mut full));
        let ids = |c: &mut clap::Command| {
            let mut v: Vec<String> = c
                .find_subcommand_mut("run")
                .expect("a run subcommand")
                .get_arguments()
                .map(|a| format!("{a:?}"))
                .collect();
            v.sort();
            v
        };
        assert_eq!(ids(&mut only), ids(&mut full));
    }
}
