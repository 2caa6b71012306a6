//! One command's run against a driver: the fault proxy in front of the driver's socket (every
//! call goes through it, so each step can show its RPCs), the step runner that prints and
//! records steps, and SIGINT/SIGTERM handling (the running step is abandoned, clean-up runs).

use std::future::Future;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use kcsi::{Error, ErrorKind};
use tokio::signal::unix::{signal, Signal, SignalKind};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tonic::transport::Channel;

use crate::driver;
use crate::fault_proxy::{Event, Fault, FaultProxy};
use crate::report::{Report, Rpc, Step};
use crate::UsageError;

/// A step's result when it did not fail: a value and a line to print, or a skip and why.
pub enum Done<T> {
    Value(T, Option<String>),
    Skipped(String),
}

pub fn value<T>(v: T) -> Done<T> {
    Done::Value(v, None)
}

/// A step failed (or was interrupted): the sequence stops and clean-up runs.
#[derive(Debug)]
pub struct Stop;

pub struct Session {
    pub report: Report,
    pub timeout: Duration,
    /// The proxy's socket: the endpoint kcsi registers the driver at.
    pub endpoint: PathBuf,
    pub channel: Channel,
    pub interrupted: bool,
    /// Set once clean-up started: signals no longer abandon steps.
    pub cleaning: bool,
    events: mpsc::UnboundedReceiver<Event>,
    sigint: Signal,
    sigterm: Signal,
    proxy: JoinHandle<()>,
    _dir: tempfile::TempDir,
}

impl Drop for Session {
    fn drop(&mut self) {
        self.proxy.abort();
    }
}

impl Session {
    pub fn start(
        endpoint: &str,
        faults: Vec<Fault>,
        json: bool,
        timeout: Duration,
    ) -> Result<Session, UsageError> {
        let socket = kcsi::socket_path(endpoint)
            .map_err(|e| UsageError(format!("--endpoint: {}", e.message())))?;
        check_socket(&socket)?;
        let dir = tempfile::Builder::new()
            .prefix("kcsi-cli-")
            .tempdir_in("/tmp")
            .map_err(|e| UsageError(format!("cannot make a temp dir in /tmp: {e}")))?;
        let proxy_socket = dir.path().join("csi.sock");
        let (tx, events) = mpsc::unbounded_channel();
        let proxy = FaultProxy::bind(&proxy_socket, &socket, faults, false, Some(tx))
            .map_err(|e| UsageError(format!("cannot listen on {}: {e}", proxy_socket.display())))?;
        let signals = || -> std::io::Result<(Signal, Signal)> {
            Ok((
                signal(SignalKind::interrupt())?,
                signal(SignalKind::terminate())?,
            ))
        };
        let (sigint, sigterm) =
            signals().map_err(|e| UsageError(format!("cannot handle signals: {e}")))?;
        Ok(Session {
            report: Report::new(json),
            timeout,
            channel: driver::channel(&proxy_socket),
            endpoint: proxy_socket,
            interrupted: false,
            cleaning: false,
            events,
            sigint,
            sigterm,
            proxy: tokio::spawn(proxy.run()),
            _dir: dir,
        })
    }

    pub fn endpoint_str(&self) -> String {
        self.endpoint.display().to_string()
    }

    fn drain(&mut self, rpcs: &mut Vec<Rpc>) {
        while let Ok(e) = self.events.try_recv() {
            rpcs.extend(self.report.event(&e));
        }
    }

    /// Runs one step: prints its RPCs as they happen, records it. `Ok(Some)` passed,
    /// `Ok(None)` skipped, `Err(Stop)` failed or interrupted.
    pub async fn step<T>(
        &mut self,
        name: &str,
        fut: impl Future<Output = Result<Done<T>, Error>>,
    ) -> Result<Option<T>, Stop> {
        self.report.begin(name);
        let start = Instant::now();
        let mut rpcs = Vec::new();
        tokio::pin!(fut);
        let result = loop {
            tokio::select! {
                biased;
                Some(e) = self.events.recv() => rpcs.extend(self.report.event(&e)),
                r = &mut fut => break Some(r),
                _ = self.sigint.recv(), if !self.cleaning => break None,
                _ = self.sigterm.recv(), if !self.cleaning => break None,
            }
        };
        let duration = start.elapsed();
        // The proxy reports a call before it answers it; what is queued belongs to this step.
        tokio::task::yield_now().await;
        self.drain(&mut rpcs);
        if !matches!(result, Some(Ok(_))) {
            // A call the caller gave up on is reported once the proxy sees the cancel.
            while let Ok(Some(e)) =
                tokio::time::timeout(Duration::from_millis(50), self.events.recv()).await
            {
                rpcs.extend(self.report.event(&e));
            }
        }
        match result {
            None => {
                self.interrupted = true;
                let err = Error::new(
                    ErrorKind::FailedPrecondition,
                    "interrupted by a signal; cleaning up what was set up",
                );
                let mut step = Report::failed(name, duration, &err, rpcs);
                step.class = None;
                self.report.finish(step, None);
                Err(Stop)
            }
            Some(Err(err)) => {
                self.report
                    .finish(Report::failed(name, duration, &err, rpcs), None);
                Err(Stop)
            }
            Some(Ok(done)) => {
                let (out, note, skipped) = match done {
                    Done::Value(v, note) => (Some(v), note, false),
                    Done::Skipped(why) => (None, Some(format!("skipped: {why}")), true),
                };
                let step = Step {
                    name: name.to_string(),
                    ok: true,
                    skipped,
                    duration,
                    grpc_code: None,
                    class: None,
                    error: None,
                    rpcs,
                };
                self.report.finish(step, note);
                Ok(out)
            }
        }
    }
}

/// An endpoint that is no socket is bad input; one that is a socket but no CSI driver shows
/// in the first step.
pub fn check_socket(socket: &std::path::Path) -> Result<(), UsageError> {
    use std::os::unix::fs::FileTypeExt;
    match std::fs::metadata(socket) {
        Ok(m) if m.file_type().is_socket() => Ok(()),
        Ok(_) => Err(UsageError(format!(
            "--endpoint: {} is not a Unix socket",
            socket.display()
        ))),
        Err(e) => Err(UsageError(format!(
            "--endpoint: cannot use {}: {e}",
            socket.display()
        ))),
    }
}
