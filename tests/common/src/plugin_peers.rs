//! The real hostpath driver and the real node-driver-registrar laid out as in a DaemonSet
//! (driver socket `<root>/plugins/<driver>/csi.sock`, registration socket in the registry
//! dir), and `FaultyRegistrationServer`, a hand-written registration server for the answers
//! no real registrar gives (wrong plugin type, undecodable bytes, hostile names).
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kcsi::proto::registration::{PluginInfo, RegistrationStatus};
use prost::bytes::{Buf, BufMut};
use prost::Message;
use tonic::codegen::{http, BoxFuture, Service};

use crate::{peer_binary, unmount_below, wait_for};

/// A child process with its output in a log file; SIGTERM-then-SIGKILL on drop.
pub struct Process {
    pub log: PathBuf,
    program: PathBuf,
    args: Vec<String>,
    child: Option<Child>,
    exit: Option<ExitStatus>,
}

impl Process {
    pub fn spawn(program: PathBuf, args: Vec<String>, log: PathBuf) -> Process {
        let mut p = Process {
            log,
            program,
            args,
            child: None,
            exit: None,
        };
        p.start();
        p
    }

    pub fn start(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .unwrap();
        let child = Command::new(&self.program)
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("start {}: {e}", self.program.display()));
        self.child = Some(child);
        self.exit = None;
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn signal(&mut self, sig: i32) {
        if let Some(c) = &self.child {
            unsafe { libc::kill(c.id() as i32, sig) };
        }
    }

    /// Sends `sig` and waits up to 10 s for the exit (then SIGKILL).
    pub fn stop_with(&mut self, sig: i32) -> Option<ExitStatus> {
        self.signal(sig);
        self.wait_exit(Duration::from_secs(10)).or_else(|| {
            self.signal(libc::SIGKILL);
            self.wait_exit(Duration::from_secs(10))
        })
    }

    /// The exit status, once the process has exited within `timeout`.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(s) = self.exit {
                return Some(s);
            }
            let c = self.child.as_mut()?;
            if let Ok(Some(s)) = c.try_wait() {
                self.exit = Some(s);
                self.child = None;
                return Some(s);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        if self.child.is_some() {
            self.stop_with(libc::SIGTERM);
        }
    }
}

/// `<root>/plugins/<driver>/csi.sock`, where a DaemonSet puts a node driver's socket.
pub fn driver_socket(root: &Path, driver: &str) -> PathBuf {
    root.join("plugins").join(driver).join("csi.sock")
}

/// The real csi-driver-host-path, serving `driver` on its socket under `root`.
pub struct Hostpath {
    pub name: String,
    pub socket: PathBuf,
    pub state: PathBuf,
    pub process: Process,
}

impl Hostpath {
    pub fn start(root: &Path, driver: &str, node_id: &str) -> Hostpath {
        let socket = driver_socket(root, driver);
        let dir = socket.parent().unwrap().to_path_buf();
        std::fs::create_dir_all(&dir).unwrap();
        let state = dir.join("state");
        let args = vec![
            format!("--endpoint=unix://{}", socket.display()),
            format!("--nodeid={node_id}"),
            format!("--statedir={}", state.display()),
            format!("--drivername={driver}"),
            "--maxvolumespernode=16".to_string(),
            "-v=3".to_string(),
        ];
        let process = Process::spawn(peer_binary("hostpath"), args, dir.join("driver.log"));
        let h = Hostpath {
            name: driver.to_string(),
            socket,
            state,
            process,
        };
        h.wait_ready();
        h
    }

    /// Ready when a connect succeeds (the file appears at bind(), before listen()).
    pub fn wait_ready(&self) {
        let socket = self.socket.clone();
        wait_for("hostpath driver socket", Duration::from_secs(20), || {
            std::os::unix::net::UnixStream::connect(&socket).is_ok()
        });
    }

    pub fn restart(&mut self) {
        self.process.stop_with(libc::SIGKILL);
        let _ = std::fs::remove_file(&self.socket);
        self.process.start();
        self.wait_ready();
    }
}

impl Drop for Hostpath {
    fn drop(&mut self) {
        self.process.stop_with(libc::SIGTERM);
        unmount_below(&self.state);
    }
}

/// The real node-driver-registrar for the driver at `csi_address`, announcing
/// `registration_path` as the driver's endpoint, its socket in `registry`.
pub struct Registrar {
    pub driver: String,
    pub socket: PathBuf,
    pub process: Process,
}

impl Registrar {
    pub fn start(
        driver: &str,
        csi_address: &Path,
        registration_path: &str,
        registry: &Path,
        log: PathBuf,
    ) -> Registrar {
        let args = vec![
            format!("--csi-address={}", csi_address.display()),
            format!("--kubelet-registration-path={registration_path}"),
            format!("--plugin-registration-path={}", registry.display()),
            "-v=5".to_string(),
        ];
        Registrar {
            driver: driver.to_string(),
            socket: registry.join(format!("{driver}-reg.sock")),
            process: Process::spawn(peer_binary("registrar"), args, log),
        }
    }

    /// A registrar for `driver` as a DaemonSet runs it: pointed at the driver's socket and
    /// announcing that same path.
    pub fn for_driver(driver: &Hostpath, registry: &Path) -> Registrar {
        let log = driver.socket.with_file_name("registrar.log");
        Registrar::start(
            &driver.name,
            &driver.socket,
            &driver.socket.display().to_string(),
            registry,
            log,
        )
    }

    /// Waits for the registration socket to exist.
    pub fn wait_socket(&self) {
        let socket = self.socket.clone();
        wait_for("registration socket", Duration::from_secs(20), || {
            socket.exists()
        });
    }

    pub fn restart(&mut self) {
        self.process.start();
    }
}

/// What a `FaultyRegistrationServer` answers to GetInfo.
#[derive(Clone)]
pub enum Answer {
    Info(PluginInfo),
    /// These bytes as the GetInfo response message.
    Bytes(Vec<u8>),
}

/// A hand-written registration server for the faults no real registrar produces. Records
/// every NotifyRegistrationStatus it receives. Runs on the caller's tokio runtime.
pub struct FaultyRegistrationServer {
    pub socket: PathBuf,
    pub statuses: Arc<Mutex<Vec<RegistrationStatus>>>,
    pub get_info_calls: Arc<Mutex<u32>>,
    task: tokio::task::JoinHandle<()>,
}

#[derive(Clone)]
struct Svc {
    answer: Answer,
    statuses: Arc<Mutex<Vec<RegistrationStatus>>>,
    get_info_calls: Arc<Mutex<u32>>,
}

impl tonic::server::NamedService for Svc {
    const NAME: &'static str = "pluginregistration.Registration";
}

/// Passes message bytes through untouched.
#[derive(Clone, Copy, Default)]
struct RawCodec;

impl tonic::codec::Codec for RawCodec {
    type Encode = Vec<u8>;
    type Decode = Vec<u8>;
    type Encoder = RawCodec;
    type Decoder = RawCodec;
    fn encoder(&mut self) -> RawCodec {
        RawCodec
    }
    fn decoder(&mut self) -> RawCodec {
        RawCodec
    }
}

impl tonic::codec::Encoder for RawCodec {
    type Item = Vec<u8>;
    type Error = tonic::Status;
    fn encode(
        &mut self,
        item: Vec<u8>,
        dst: &mut tonic::codec::EncodeBuf<'_>,
    ) -> Result<(), tonic::Status> {
        dst.put_slice(&item);
        Ok(())
    }
}

impl tonic::codec::Decoder for RawCodec {
    type Item = Vec<u8>;
    type Error = tonic::Status;
    fn decode(
        &mut self,
        src: &mut tonic::codec::DecodeBuf<'_>,
    ) -> Result<Option<Vec<u8>>, tonic::Status> {
        let mut v = vec![0; src.remaining()];
        src.copy_to_slice(&mut v);
        Ok(Some(v))
    }
}

impl Service<http::Request<tonic::body::Body>> for Svc {
    type Response = http::Response<tonic::body::Body>;
    type Error = std::convert::Infallible;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<tonic::body::Body>) -> Self::Future {
        let svc = self.clone();
        Box::pin(async move {
            let mut grpc = tonic::server::Grpc::new(RawCodec);
            let resp = match req.uri().path() {
                "/pluginregistration.Registration/GetInfo" => {
                    *svc.get_info_calls.lock().unwrap() += 1;
                    let bytes = match &svc.answer {
                        Answer::Info(info) => info.encode_to_vec(),
                        Answer::Bytes(b) => b.clone(),
                    };
                    grpc.unary(
                        tower::service_fn(move |_: tonic::Request<Vec<u8>>| {
                            let bytes = bytes.clone();
                            async move { Ok::<_, tonic::Status>(tonic::Response::new(bytes)) }
                        }),
                        req,
                    )
                    .await
                }
                "/pluginregistration.Registration/NotifyRegistrationStatus" => {
                    let statuses = svc.statuses.clone();
                    grpc.unary(
                        tower::service_fn(move |r: tonic::Request<Vec<u8>>| {
                            let statuses = statuses.clone();
                            async move {
                                let status = RegistrationStatus::decode(r.into_inner().as_slice())
                                    .map_err(|e| tonic::Status::internal(e.to_string()))?;
                                statuses.lock().unwrap().push(status);
                                Ok::<_, tonic::Status>(tonic::Response::new(Vec::new()))
                            }
                        }),
                        req,
                    )
                    .await
                }
                _ => tonic::Status::unimplemented("no such method").into_http(),
            };
            Ok(resp)
        })
    }
}

impl FaultyRegistrationServer {
    /// Serves `answer` at `socket` (call inside a tokio runtime).
    pub fn start(socket: &Path, answer: Answer) -> FaultyRegistrationServer {
        let statuses = Arc::new(Mutex::new(Vec::new()));
        let get_info_calls = Arc::new(Mutex::new(0));
        let svc = Svc {
            answer,
            statuses: statuses.clone(),
            get_info_calls: get_info_calls.clone(),
        };
        let listener = tokio::net::UnixListener::bind(socket).expect("bind fault server socket");
        let incoming = tokio_stream::wrappers::UnixListenerStream::new(listener);
        let task = tokio::spawn(async move {
            let _ = tonic::transport::Server::builder()
                .add_service(svc)
                .serve_with_incoming(incoming)
                .await;
        });
        FaultyRegistrationServer {
            socket: socket.to_path_buf(),
            statuses,
            get_info_calls,
            task,
        }
    }

    pub fn statuses(&self) -> Vec<RegistrationStatus> {
        self.statuses.lock().unwrap().clone()
    }

    pub fn get_info_calls(&self) -> u32 {
        *self.get_info_calls.lock().unwrap()
    }
}

impl Drop for FaultyRegistrationServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A registration reply as node-driver-registrar builds it.
pub fn plugin_info(kind: &str, name: &str, endpoint: &str, versions: &[&str]) -> PluginInfo {
    PluginInfo {
        r#type: kind.to_string(),
        name: name.to_string(),
        endpoint: endpoint.to_string(),
        supported_versions: versions.iter().map(|v| v.to_string()).collect(),
    }
}
