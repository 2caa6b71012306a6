//! `kcsi`: the kubelet's CSI volume plugin (the kcsi library) run from the command line
//! against a CSI driver, with no cluster. Bad input gets one line on stderr and exit status 2,
//! never a stack trace.

mod args;
mod conformance;
mod driver;
mod fault_proxy;
mod kubelet;
mod lifecycle;
mod node;
mod on_disk;
mod probe;
mod provisioner;
mod report;
mod session;
mod single;
mod steps;
mod volume_plugin;
mod watch;
mod wire;

use std::sync::Arc;

use clap::Parser;

use args::{Cli, Command};

/// Input the command cannot run with: one line on stderr, exit status 2.
#[derive(Debug)]
pub struct UsageError(pub String);

fn parse() -> Cli {
    match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            use clap::error::ErrorKind;
            if matches!(
                e.kind(),
                ErrorKind::DisplayHelp
                    | ErrorKind::DisplayVersion
                    | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
            ) {
                let _ = e.print();
                std::process::exit(
                    if e.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
                        2
                    } else {
                        0
                    },
                );
            }
            // clap's message without its usage and tip paragraphs, on one line.
            let text = e.render().to_string();
            let main = text.split("\n\nUsage:").next().unwrap_or_default();
            let main = main.split("\n\n  tip:").next().unwrap_or_default();
            let line = main.split_whitespace().collect::<Vec<_>>().join(" ");
            let line = line.trim_start_matches("error: ");
            eprintln!("kcsi: {line} (see kcsi --help)");
            std::process::exit(2);
        }
    }
}

/// kcsi's own log lines go to stderr from level `verbose` (0: errors only).
fn logging(verbose: u8) {
    kcsi::init_logging();
    let level = match verbose {
        0 => 0,
        1 => 2,
        2 => 3,
        _ => 4,
    };
    kcsi::set_log_sink(
        Some(Arc::new(|_level, target: &str, message: &str| {
            eprintln!("kcsi log [{target}]: {message}");
        })),
        level,
    );
}

fn main() {
    std::panic::set_hook(Box::new(|info| {
        let msg = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "panic".into());
        let at = info
            .location()
            .map(|l| format!(" at {}:{}", l.file(), l.line()))
            .unwrap_or_default();
        eprintln!("kcsi: internal error{at}: {}", msg.replace('\n', " "));
    }));
    let cli = parse();
    logging(cli.verbose);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("kcsi: cannot start the async runtime: {e}");
            std::process::exit(2);
        }
    };
    let json = cli.json;
    let result = runtime.block_on(async move {
        match cli.command {
            Command::Lifecycle(a) => lifecycle::run(a, json).await,
            Command::Stage(a) => single::stage(a, json).await,
            Command::Publish(a) => single::publish(a, json).await,
            Command::Unpublish(a) => single::unpublish(a, json).await,
            Command::Unstage(a) => single::unstage(a, json).await,
            Command::Stats(a) => single::stats(a, json).await,
            Command::Expand(a) => single::expand(a, json).await,
            Command::Reconstruct(a) => on_disk::reconstruct(a, json),
            Command::List(a) => on_disk::list(a, json),
            Command::Watch(a) => watch::run(a, json).await,
            Command::FaultProxy(a) => serve_fault_proxy(a).await,
            Command::VolumePlugin(a) => volume_plugin::run(a).await,
            Command::CreateVolume(a) => provisioner::create(a).await,
            Command::DeleteVolume(a) => provisioner::delete(a).await,
            Command::Conformance(a) => conformance::run(a, json).await,
        }
    });
    // Dropping the runtime would wait for the proxy's connection tasks; the exit needs no wait.
    let code = match result {
        Ok(code) => code,
        Err(UsageError(msg)) => {
            eprintln!("kcsi: {msg}");
            2
        }
    };
    runtime.shutdown_background();
    std::process::exit(code);
}

async fn serve_fault_proxy(a: args::FaultProxyCmd) -> Result<i32, UsageError> {
    use tokio::signal::unix::{signal, SignalKind};
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let proxy = fault_proxy::FaultProxy::bind(&a.listen, &a.upstream, a.fault, a.every, Some(tx))
        .map_err(|e| UsageError(format!("cannot listen on {}: {e}", a.listen.display())))?;
    let (mut sigint, mut sigterm) = match (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    ) {
        (Ok(i), Ok(t)) => (i, t),
        (Err(e), _) | (_, Err(e)) => return Err(UsageError(format!("cannot handle signals: {e}"))),
    };
    let report = report::Report::new(!a.trace);
    let serve = tokio::spawn(proxy.run());
    loop {
        tokio::select! {
            Some(e) = rx.recv() => { report.event(&e); }
            _ = sigint.recv() => break,
            _ = sigterm.recv() => break,
        }
    }
    serve.abort();
    let _ = std::fs::remove_file(&a.listen);
    Ok(0)
}
