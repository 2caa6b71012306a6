//! `kcsi lifecycle`: the kubelet's whole sequence against a driver, then clean-up of whatever
//! a failed or interrupted run left set up, so no mount stays behind.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use kcsi::access_mode;
use kcsi::parse_bytes;
use kcsi::NodeAgent;

use crate::args::LifecycleArgs;
use crate::driver::{self, NewVolume};
use crate::node::{self, Volume};
use crate::session::{Done, Session, Stop};
use crate::steps;
use crate::UsageError;

/// What is set up and must be undone if the run stops early.
#[derive(Default)]
struct SetUp {
    created: Option<String>,
    registered: bool,
    staged: bool,
    published: bool,
}

struct Run {
    s: Session,
    args: LifecycleArgs,
    root: PathBuf,
    node: String,
    driver: String,
    csidriver: serde_json::Value,
    host: Option<NodeAgent>,
    volume: Option<Volume>,
    up: SetUp,
    secrets: kcsi::SecretsFile,
}

pub async fn run(args: LifecycleArgs, json: bool) -> Result<i32, UsageError> {
    let timeout = args.driver.timeout;
    if !(timeout.is_finite() && timeout > 0.0 && timeout <= 86_400.0) {
        return Err(UsageError(format!(
            "--timeout {timeout}: must be > 0 and at most 86400"
        )));
    }
    let secrets = node::secrets_file(&args.volume)?;
    let size = match &args.create {
        Some(text) => {
            Some(parse_bytes(text).map_err(|e| UsageError(format!("--create: {}", e.message())))?)
        }
        None => None,
    };
    let (root, temp_root) = match &args.root {
        Some(r) => (node::absolute("--root", r)?, None),
        None => {
            let t = tempfile::Builder::new()
                .prefix("kcsi-root-")
                .tempdir_in("/tmp")
                .map_err(|e| UsageError(format!("cannot make a root dir in /tmp: {e}")))?;
            (t.path().to_path_buf(), Some(t))
        }
    };
    let s = Session::start(
        &args.driver.endpoint,
        args.driver.fault.clone(),
        json,
        Duration::from_secs_f64(timeout),
    )?;
    let node = node::node_name(&args.driver.node_name);
    s.report.say(format!(
        "kcsi lifecycle: endpoint {}, node {node}, root {}",
        args.driver.endpoint,
        root.display()
    ));
    let mut run = Run {
        s,
        args,
        root,
        node,
        driver: String::new(),
        csidriver: serde_json::Value::Null,
        host: None,
        volume: None,
        up: SetUp::default(),
        secrets,
    };
    let outcome = run.sequence(size).await;
    if let Err(Stop) = &outcome {
        run.clean_up().await;
    }
    let root = run.root.clone();
    let _ = steps::unmount_leftovers(&mut run.s, &root).await;
    run.s.report.summary();
    let code = if run.s.interrupted {
        130
    } else if run.s.report.ok() {
        0
    } else {
        1
    };
    drop(run);
    if let Some(t) = temp_root {
        // Only an empty tree is removed: a mount that could not be undone stays visible.
        if kcsi::mounts_below(t.path()).is_ok_and(|m| m.is_empty()) {
            let _ = t.close();
        } else {
            let _ = t.keep();
        }
    }
    Ok(code)
}

impl Run {
    fn new_host(&mut self) -> Result<(), Stop> {
        match node::host(
            &self.root,
            &self.node,
            self.args.driver.timeout,
            Some(&self.csidriver),
        ) {
            Ok(h) => {
                self.host = Some(h);
                Ok(())
            }
            Err(e) => {
                eprintln!("kcsi: {}", e.0);
                Err(Stop)
            }
        }
    }

    async fn sequence(&mut self, size: Option<i64>) -> Result<(), Stop> {
        let want = self.args.driver.driver.clone();
        self.driver = match steps::identify(&mut self.s, want.as_deref()).await {
            Ok(d) => d,
            Err(Stop) => {
                let e = self.s.report.steps.last().and_then(|s| s.error.clone());
                eprintln!("kcsi: {}", e.unwrap_or_else(|| "interrupted".into()));
                return Err(Stop);
            }
        };
        let attach = !self.args.volume.publish_context.is_empty();
        self.csidriver = match node::csidriver(&self.args.driver, &self.driver, attach) {
            Ok(c) => c,
            Err(e) => {
                eprintln!("kcsi: {}", e.0);
                return Err(Stop);
            }
        };
        self.new_host()?;

        let mut attributes = BTreeMap::new();
        let handle = match (&self.args.volume_handle, size) {
            (Some(h), _) => h.clone(),
            (None, Some(bytes)) => {
                let v = self.create(bytes).await?;
                attributes.extend(v.volume_context);
                v.volume_id
            }
            (None, None) => unreachable!("clap requires --volume-handle or --create"),
        };
        let attach_required = node::attach_required(self.host.as_ref().ok_or(Stop)?, &self.driver);
        let volume = match node::volume(
            &self.driver,
            &handle,
            &self.args.volume,
            &attributes,
            attach_required,
        ) {
            Ok(v) => v,
            Err(e) => {
                eprintln!("kcsi: {}", e.0);
                return Err(Stop);
            }
        };
        self.volume = Some(volume.clone());
        let v = &volume;

        let host = self.host.as_ref().ok_or(Stop)?;
        steps::register(&mut self.s, host, &self.driver, "register").await?;
        self.up.registered = true;
        steps::attach_wait(&mut self.s, host, v).await?;
        self.up.staged = true;
        steps::stage(&mut self.s, host, v).await?;
        self.up.published = true;
        let path = steps::publish(&mut self.s, host, v).await?;
        steps::probe(&mut self.s, v, &path).await?;
        steps::stats(&mut self.s, host, &v.driver, &v.handle, &path).await?;

        // A kubelet restart: this host and its driver registration go; a new one starts from
        // what is on disk.
        self.host = None;
        self.new_host()?;
        let host = self.host.as_ref().ok_or(Stop)?;
        steps::register(&mut self.s, host, &self.driver, "restart").await?;
        steps::reconstruct(&mut self.s, host, v).await?;

        steps::unpublish(&mut self.s, host, v.block, &v.spec_name, &v.pod_uid).await?;
        self.up.published = false;
        steps::unstage(
            &mut self.s,
            host,
            v.block,
            &v.driver,
            &v.handle,
            &v.spec_name,
        )
        .await?;
        self.up.staged = false;
        steps::deregister(&mut self.s, host, &self.driver).await?;
        self.up.registered = false;
        if let Some(id) = self.up.created.clone() {
            self.delete(&id).await?;
        }
        Ok(())
    }

    async fn create(&mut self, bytes: i64) -> Result<kcsi::proto::csi::Volume, Stop> {
        let stamp = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis());
        let v = &self.args.volume;
        let request = NewVolume {
            name: format!("kcsi-{}-{stamp}", std::process::id()),
            bytes,
            block: v.block,
            fs_type: v.fs_type.as_deref().unwrap_or(""),
            mount_flags: v.mount_options.clone(),
            access_mode: access_mode(&v.access_mode, &Default::default()),
            parameters: self.args.parameters.iter().cloned().collect(),
            secrets: self.secrets.create_volume_secret.clone(),
            topology: None,
        };
        let ch = self.s.channel.clone();
        let timeout = self.s.timeout;
        let created = self
            .s
            .step("create", async move {
                let vol = driver::create_volume(&ch, request, timeout).await?;
                let note = format!(
                    "created volume {} ({} bytes)",
                    vol.volume_id, vol.capacity_bytes
                );
                Ok(Done::Value(vol, Some(note)))
            })
            .await?
            .ok_or(Stop)?;
        self.up.created = Some(created.volume_id.clone());
        Ok(created)
    }

    async fn delete(&mut self, id: &str) -> Result<(), Stop> {
        let ch = self.s.channel.clone();
        let timeout = self.s.timeout;
        let secrets = self.secrets.delete_volume_secret.clone();
        let id = id.to_string();
        self.s
            .step("delete", async move {
                driver::delete_volume(&ch, &id, secrets, timeout).await?;
                Ok(Done::Value((), Some(format!("deleted volume {id}"))))
            })
            .await?;
        self.up.created = None;
        Ok(())
    }

    /// Undoes what is set up, newest first, each step tried even when an earlier one failed.
    async fn clean_up(&mut self) {
        self.s.cleaning = true;
        if self.s.interrupted {
            self.s
                .report
                .say("interrupted: cleaning up (signals are ignored until done)");
        }
        let Some(v) = self.volume.clone() else {
            return;
        };
        if self.host.is_none() {
            // Stopped between the old host and the new one: start the new one.
            let _ = self.new_host();
        }
        if let Some(host) = self.host.as_ref() {
            if (self.up.published || self.up.staged) && host.drivers().get(&self.driver).is_none() {
                let _ =
                    steps::register(&mut self.s, host, &self.driver, "register (clean-up)").await;
            }
            if self.up.published {
                let _ =
                    steps::unpublish(&mut self.s, host, v.block, &v.spec_name, &v.pod_uid).await;
            }
            if self.up.staged {
                let _ = steps::unstage(
                    &mut self.s,
                    host,
                    v.block,
                    &v.driver,
                    &v.handle,
                    &v.spec_name,
                )
                .await;
            }
            if self.up.registered && host.drivers().get(&self.driver).is_some() {
                let _ = steps::deregister(&mut self.s, host, &self.driver).await;
            }
        }
        if let Some(id) = self.up.created.clone() {
            let _ = self.delete(&id).await;
        }
    }
}
