//! The driver's process when the suite owns it (`--driver-command`): started before the first
//! call, started again after a crash case killed it inside a call, stopped at the end. Only
//! then can the kill cases see the kubelet's retry meet a restarted driver.

use std::os::fd::AsFd;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long a stopped driver gets to exit on SIGTERM before its process group is SIGKILLed.
const GRACE: Duration = Duration::from_secs(5);

pub struct OwnedDriver {
    command: String,
    socket: PathBuf,
    /// How long the driver gets to listen on its socket after a start.
    ready_within: Duration,
    /// `sh -c COMMAND`, leader of its own process group.
    child: Mutex<Child>,
}

fn answers(socket: &Path) -> bool {
    std::os::unix::net::UnixStream::connect(socket).is_ok()
}

impl OwnedDriver {
    /// Runs `command` with `sh -c` and waits until something listens on `socket`. Refuses a
    /// socket something already answers on: that driver would be the one the cases kill.
    pub async fn start(
        command: &str,
        socket: &Path,
        ready_within: Duration,
    ) -> Result<Self, String> {
        if answers(socket) {
            return Err(format!(
                "{} already answers: the suite starts the driver itself with --driver-command, \
                 so stop the one listening there",
                socket.display()
            ));
        }
        let child = spawn(command)?;
        let d = OwnedDriver {
            command: command.to_string(),
            socket: socket.to_path_buf(),
            ready_within,
            child: Mutex::new(child),
        };
        d.wait_ready().await?;
        Ok(d)
    }

    fn child(&self) -> std::sync::MutexGuard<'_, Child> {
        self.child.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Polls until the socket answers; fails when the command exits first or time runs out.
    async fn wait_ready(&self) -> Result<(), String> {
        let start = Instant::now();
        loop {
            if answers(&self.socket) {
                return Ok(());
            }
            if let Ok(Some(status)) = self.child().try_wait() {
                return Err(format!(
                    "--driver-command {:?} exited ({status}) before listening on {}",
                    self.command,
                    self.socket.display()
                ));
            }
            if start.elapsed() > self.ready_within {
                return Err(format!(
                    "--driver-command {:?} did not listen on {} within {:?}",
                    self.command,
                    self.socket.display(),
                    self.ready_within
                ));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Whether the process the suite started exits within `within` (a driver killed inside
    /// a call does at once).
    pub async fn exits_within(&self, within: Duration) -> bool {
        let start = Instant::now();
        loop {
            if !matches!(self.child().try_wait(), Ok(None)) {
                return true;
            }
            if start.elapsed() > within {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Starts the driver again after it was killed: what is left of its process group goes
    /// first, then the command runs as at the start.
    pub async fn restart(&self) -> Result<(), String> {
        {
            let mut child = self.child();
            stop(&mut child, Duration::ZERO);
            *child = spawn(&self.command)?;
        }
        self.wait_ready().await
    }
}

impl Drop for OwnedDriver {
    fn drop(&mut self) {
        stop(&mut self.child(), GRACE);
    }
}

fn spawn(command: &str) -> Result<Child, String> {
    // The driver's output goes to stderr: stdout carries --json.
    let out = std::io::stderr()
        .as_fd()
        .try_clone_to_owned()
        .map_err(|e| format!("cannot hand stderr to --driver-command: {e}"))?;
    Command::new("sh")
        .arg("-c")
        .arg(command)
        .stdin(Stdio::null())
        .stdout(Stdio::from(out))
        .process_group(0)
        .spawn()
        .map_err(|e| format!("cannot run --driver-command {command:?} with sh -c: {e}"))
}

/// SIGTERM to the child's process group, `grace` to exit, then SIGKILL; the child is reaped.
fn stop(child: &mut Child, grace: Duration) {
    let group = -(child.id() as i32);
    let signal = |sig| {
        // SAFETY: kill(2) on the process group the suite made for the driver it started.
        unsafe { libc::kill(group, sig) };
    };
    if matches!(child.try_wait(), Ok(None)) && !grace.is_zero() {
        signal(libc::SIGTERM);
        let start = Instant::now();
        while matches!(child.try_wait(), Ok(None)) && start.elapsed() < grace {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    // Also what the group's leader left behind (a driver `sh -c` did not exec).
    signal(libc::SIGKILL);
    let _ = child.wait();
}
