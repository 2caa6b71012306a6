//! `kcsi volume-plugin`: any CSI driver as a Docker / Podman volume plugin. One standalone
//! kcsi host (the kubelet side) under `<root>/kubelet`, the driver registered on it as
//! node-driver-registrar would, the volumes' descriptions under `<root>/volumes`, and the
//! Docker volume plugin protocol served on a Unix socket until SIGINT or SIGTERM.

mod attach;
mod counts;
mod options;
mod protocol;
mod state;
mod volumes;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use kcsi::registration;
use serde_json::json;
use tokio::net::UnixListener;
use tokio::signal::unix::{signal, SignalKind};

use crate::args::VolumePluginCmd;
use crate::{driver, node, UsageError};

/// The versions node-driver-registrar reports for every driver.
const VERSIONS: &[&str] = &["1.0.0"];

/// Binds `listen`, replacing a socket nobody serves (a killed plugin's); refuses one that
/// answers, or a path that is no socket.
fn bind(listen: &Path) -> Result<UnixListener, UsageError> {
    use std::os::unix::fs::FileTypeExt;
    let cannot = |e: &dyn std::fmt::Display| {
        UsageError(format!(
            "--listen: cannot listen on {}: {e}",
            listen.display()
        ))
    };
    match std::fs::symlink_metadata(listen) {
        Ok(m) if m.file_type().is_socket() => {
            if std::os::unix::net::UnixStream::connect(listen).is_ok() {
                return Err(cannot(&"another process serves it"));
            }
            std::fs::remove_file(listen).map_err(|e| cannot(&e))?;
        }
        Ok(_) => return Err(cannot(&"it exists and is not a socket")),
        Err(_) => {}
    }
    if let Some(dir) = listen.parent() {
        std::fs::create_dir_all(dir).map_err(|e| cannot(&e))?;
    }
    UnixListener::bind(listen).map_err(|e| cannot(&e))
}

pub async fn run(a: VolumePluginCmd) -> Result<i32, UsageError> {
    state::check_name("--name", &a.name).map_err(|e| UsageError(e.message().to_string()))?;
    let t = a.timeout;
    if !(t.is_finite() && t > 0.0 && t <= 86_400.0) {
        return Err(UsageError(format!(
            "--timeout {t}: must be > 0 and at most 86400"
        )));
    }
    let timeout = Duration::from_secs_f64(t);
    let root = match &a.root {
        Some(r) => node::absolute("--root", r)?,
        None => PathBuf::from("/var/lib/kcsi").join(&a.name),
    };
    let listen = match &a.listen {
        Some(l) => node::absolute("--listen", l)?,
        None => PathBuf::from("/run/docker/plugins").join(format!("{}.sock", a.name)),
    };
    let socket = kcsi::socket_path(&a.endpoint)
        .map_err(|e| UsageError(format!("--endpoint: {}", e.message())))?;
    let channel = driver::channel(&socket);
    let unusable = |e: kcsi::Error| {
        UsageError(format!(
            "--endpoint {}: {}",
            a.endpoint,
            protocol::err_text(&e)
        ))
    };
    let (driver_name, version) = driver::plugin_info(&channel, timeout)
        .await
        .map_err(unusable)?;
    let can_create = driver::has_controller(&channel, timeout)
        .await
        .map_err(unusable)?;
    let attach = can_create
        && driver::publishes_volumes(&channel, timeout)
            .await
            .map_err(unusable)?;
    // The plugin attaches itself (see `attach`); the stand-in says whether kcsi waits for it.
    let csidriver = json!({"metadata": {"name": driver_name}, "spec": {"attachRequired": attach}});
    let host = node::host(
        &root.join("kubelet"),
        &node::node_name(&a.node_name),
        t,
        Some(&csidriver),
    )?;
    // Made now, not by the first call that reads it.
    host.files()
        .open()
        .map_err(|e| UsageError(format!("--root: {e}")))?;
    let secrets_dir = match &a.secrets_dir {
        Some(d) if d.is_dir() => Some(node::absolute("--secrets-dir", d)?),
        Some(d) => {
            return Err(UsageError(format!(
                "--secrets-dir {}: not a directory",
                d.display()
            )))
        }
        None => None,
    };
    let versions: Vec<String> = VERSIONS.iter().map(|v| v.to_string()).collect();
    let info = registration::register(
        &host,
        &driver_name,
        &socket.display().to_string(),
        &versions,
        None,
    )
    .await
    .map_err(unusable)?;
    let store = state::Store::open(&root).map_err(|e| UsageError(format!("--root: {e}")))?;
    let side = volumes::DriverSide {
        name: driver_name.clone(),
        channel,
        can_create,
        attach,
        node_id: info.node_id,
        topology: info.topology,
        timeout,
    };
    let plugin = Arc::new(volumes::Plugin::new(
        a.name.clone(),
        host,
        side,
        store,
        secrets_dir,
    ));
    let found = plugin
        .found()
        .map_err(|e| UsageError(format!("--root: {e}")))?;
    // Before serving: a runtime's first call finds the volumes as the kill left them, detached.
    for (name, detached) in plugin.recover().await {
        match detached {
            Ok(()) => eprintln!(
                "kcsi volume-plugin: volume {name} was left attached with nothing staged: detached"
            ),
            Err(e) => eprintln!(
                "kcsi volume-plugin: volume {name} was left attached with nothing staged: {}",
                protocol::err_text(&e)
            ),
        }
    }
    let listener = bind(&listen)?;
    let (mut sigint, mut sigterm) = match (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    ) {
        (Ok(i), Ok(t)) => (i, t),
        (Err(e), _) | (_, Err(e)) => return Err(UsageError(format!("cannot handle signals: {e}"))),
    };
    eprintln!(
        "kcsi volume-plugin {}: serving {} for CSI driver {driver_name} {version} ({}), root {}, {} volume(s)",
        a.name,
        listen.display(),
        match (can_create, attach) {
            (true, true) => "creates and attaches volumes",
            (true, false) => "creates volumes",
            _ => "existing volumes only",
        },
        root.display(),
        found.len()
    );
    for (name, publishes, counts) in &found {
        for p in publishes {
            eprintln!(
                "kcsi volume-plugin: found volume {name} published for {} at {}, {} Mount \
                 call(s) counted{}",
                p.pod_uid,
                p.path.display(),
                counts.of(&p.pod_uid),
                p.error
                    .as_ref()
                    .map(|e| format!(" ({e})"))
                    .unwrap_or_default()
            );
        }
    }
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => { tokio::spawn(protocol::serve(plugin.clone(), stream)); }
                Err(e) => {
                    eprintln!("kcsi volume-plugin: accept on {}: {e}", listen.display());
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            },
            _ = sigint.recv() => break,
            _ = sigterm.recv() => break,
        }
    }
    // Calls under way finish first; mounted volumes stay mounted (the next start finds them).
    let _ = std::fs::remove_file(&listen);
    let _idle = plugin.busy.write().await;
    Ok(0)
}
