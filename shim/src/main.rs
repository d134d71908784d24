//! The `vetto` binary: the command line edge, where errors get their context.

use std::process::ExitCode;

use anyhow::Result;
use clap::CommandFactory;
use tracing_subscriber::EnvFilter;

use vetto::cli::{Cli, Command, PolicyCommand, ProfilesCommand};
use vetto::{
    approvals_cmd, audit, broker_cmd, changes_cmd, connect, doctor, policy_cmd, run, watch,
};

fn init_tracing(verbose: u8) {
    // libcontainer logs its own view of things vetto does differently (seccomp is applied by
    // vetto's init, not libcontainer's): keep its noise out of normal output. At -v its init
    // warned "seccomp not available, unable to set seccomp privileges!" in every session
    // (libcontainer is built without libseccomp; vetto's filter is applied by vetto's init,
    // and the escape suite checks it): that module says only its errors below -vv.
    let default = match verbose {
        0 => "warn,libcontainer=error,libcgroups=error",
        1 => "info,libcontainer=warn,libcgroups=warn,libcontainer::process::init::process=error",
        2 => "debug",
        _ => "trace",
    };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        // SAFETY: isatty only inspects the descriptor.
        .with_ansi(unsafe { libc::isatty(2) } == 1 && std::env::var_os("NO_COLOR").is_none())
        .init();
}

fn run(cli: Cli) -> Result<ExitCode> {
    match cli.command {
        Command::Run(args) => return run::run(&args).map(ExitCode::from),
        Command::Policy(PolicyCommand::Check { file, policy }) => {
            policy_cmd::check(file.as_deref(), &policy)?
        }
        Command::Policy(PolicyCommand::Explain { json, policy }) => {
            policy_cmd::explain(&policy, json)?
        }
        Command::Policy(PolicyCommand::Schema) => println!("{}", vetto_bundle::schema()),
        Command::Policy(PolicyCommand::Import { file, out }) => {
            policy_cmd::import(&file, out.as_deref())?
        }
        Command::Policy(PolicyCommand::Show { profile }) => {
            match vetto_bundle::profiles::text(&profile) {
                Some(t) => print!("{t}"),
                None => return Err(vetto_bundle::PolicyError::UnknownProfile(profile).into()),
            }
        }
        Command::Trust { file } => policy_cmd::trust(&file)?,
        Command::Profiles(ProfilesCommand::List) => policy_cmd::profiles_list()?,
        Command::Profiles(ProfilesCommand::Show { name }) => policy_cmd::profiles_show(&name)?,
        Command::Audit(c) => return audit::command(&c).map(ExitCode::from),
        Command::Changes(c) => return changes_cmd::command(&c).map(ExitCode::from),
        Command::Approvals(a) => return approvals_cmd::command(&a).map(ExitCode::from),
        Command::Watch { store } => return watch::run(store.as_deref()).map(ExitCode::from),
        Command::Doctor { json, no_selftest } => {
            let mut r = doctor::probe();
            if !no_selftest && r.tier != doctor::Tier::None {
                let st = doctor::selftest(r.tier);
                if st.iter().any(|p| !p.ok) || st.is_empty() {
                    r.tier = doctor::Tier::None;
                    r.reason = "the self-test sandbox did not enforce every control".into();
                }
                r.selftest = Some(st);
            }
            if json {
                println!("{}", serde_json::to_string_pretty(&r)?);
            } else {
                doctor::print(&r);
            }
            if r.tier == doctor::Tier::None {
                return Ok(ExitCode::from(1));
            }
        }
        Command::Broker => broker_cmd::run()?,
        Command::Connect { host, port } => connect::run(&host, port)?,
        Command::Completions { shell } => {
            clap_complete::generate(shell, &mut Cli::command(), "vetto", &mut std::io::stdout());
        }
        Command::Man { out } => {
            std::fs::create_dir_all(&out)?;
            clap_mangen::generate_to(Cli::command(), &out)?;
            println!("man pages written to {}", out.display());
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn main() -> ExitCode {
    let cli = vetto::cli::parse();
    if matches!(cli.command, Command::Run(_)) {
        // The caller waits for this process: it becomes the front, which exits with the
        // command's status as soon as the supervisor (its child, from here) has it.
        vetto::front::split();
    } else {
        // Printing commands end quietly when their reader goes away (`| head`).
        // SAFETY: restoring the default disposition of one signal before any thread exists.
        unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    }
    init_tracing(cli.verbose);
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("vetto: {}", vetto_broker::error_chain(e.as_ref()));
            ExitCode::from(2)
        }
    }
}
