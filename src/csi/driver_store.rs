//! The registered CSI drivers of one host: name → endpoint, highest CSI version, node info and
//! the driver's gRPC client. Each registration has a generation so a failed registration only
//! rolls back itself, never a newer one that replaced it meanwhile.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use crate::csi::csi_client::{CsiClient, NodeInfo};
use crate::csi::version::Version;

#[derive(Clone)]
pub struct Driver {
    pub name: String,
    pub endpoint: String,
    pub version: Version,
    pub client: CsiClient,
    /// Set once `NodeGetInfo` answered; until then the registration is in progress.
    pub node_info: Option<NodeInfo>,
    pub generation: u64,
}

#[derive(Default)]
pub struct DriverStore {
    inner: RwLock<Inner>,
}

#[derive(Default)]
struct Inner {
    drivers: HashMap<String, Arc<Driver>>,
    next_generation: u64,
}

impl DriverStore {
    fn read(&self) -> std::sync::RwLockReadGuard<'_, Inner> {
        self.inner.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Inner> {
        self.inner.write().unwrap_or_else(|p| p.into_inner())
    }

    pub fn get(&self, name: &str) -> Option<Arc<Driver>> {
        self.read().drivers.get(name).cloned()
    }

    /// Inserts a new registration if `admit` accepts the current entry (checked under the same
    /// lock, so two racing registrations cannot both pass the version rule). Returns the
    /// stored driver.
    pub fn insert_if<E>(
        &self,
        name: &str,
        admit: impl FnOnce(Option<&Driver>) -> Result<(), E>,
        make: impl FnOnce(u64) -> Result<Driver, E>,
    ) -> Result<Arc<Driver>, E> {
        let mut inner = self.write();
        admit(inner.drivers.get(name).map(|d| &**d))?;
        inner.next_generation += 1;
        let driver = Arc::new(make(inner.next_generation)?);
        inner.drivers.insert(name.to_string(), driver.clone());
        Ok(driver)
    }

    /// Records node info for the registration `generation`, if it is still the current one.
    pub fn complete(&self, name: &str, generation: u64, info: NodeInfo) -> bool {
        let mut inner = self.write();
        match inner.drivers.get_mut(name) {
            Some(d) if d.generation == generation => {
                let mut updated = (**d).clone();
                updated.node_info = Some(info);
                *d = Arc::new(updated);
                true
            }
            _ => false,
        }
    }

    /// Removes the registration `generation` only; a newer one stays.
    pub fn remove_generation(&self, name: &str, generation: u64) -> bool {
        let mut inner = self.write();
        if inner
            .drivers
            .get(name)
            .is_some_and(|d| d.generation == generation)
        {
            inner.drivers.remove(name);
            return true;
        }
        false
    }

    /// Removes the registration `generation` if it never completed.
    pub fn remove_pending(&self, name: &str, generation: u64) {
        let mut inner = self.write();
        if inner
            .drivers
            .get(name)
            .is_some_and(|d| d.generation == generation && d.node_info.is_none())
        {
            inner.drivers.remove(name);
        }
    }

    pub fn remove(&self, name: &str) -> Option<Arc<Driver>> {
        self.write().drivers.remove(name)
    }

    /// Completed registrations, sorted by name.
    pub fn list(&self) -> Vec<Arc<Driver>> {
        let mut all: Vec<Arc<Driver>> = self
            .read()
            .drivers
            .values()
            .filter(|d| d.node_info.is_some())
            .cloned()
            .collect();
        all.sort_by(|a, b| a.name.cmp(&b.name));
        all
    }
}
