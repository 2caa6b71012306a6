//! Mount calls per caller. Docker names each mount point of a container with an ID and calls
//! Mount again with that ID whenever the daemon needs the volume beside the running container
//! (`docker cp`, a stat of its filesystem), then Unmount once for each: only the Unmount that
//! balances the first Mount ends the container's use. A caller's publish therefore stays until
//! its Mount and Unmount calls balance. Podman calls Mount once per volume and counts its own
//! users, so its calls always balance at one.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Mount calls not yet balanced by an Unmount, by caller (pod UID); callers at zero are absent.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(transparent)]
pub struct Counts(BTreeMap<String, u64>);

impl Counts {
    /// Mount calls of `uid` not yet balanced.
    pub fn of(&self, uid: &str) -> u64 {
        self.0.get(uid).copied().unwrap_or(0)
    }

    /// One Mount of `uid` on a publish that is mounted. A publish with no count is one Mount
    /// (made by a kcsi that did not count, or by a Mount killed before it saved its count);
    /// a count whose publish is not mounted any more (unmounted by hand, or by a reboot) is
    /// void, so a caller starting again counts from zero.
    pub fn mount(&mut self, uid: &str, mounted: bool) {
        let held = match (self.of(uid), mounted) {
            (_, false) => 0,
            (0, true) => 1,
            (n, true) => n,
        };
        self.0.insert(uid.to_string(), held.saturating_add(1));
    }

    /// One Unmount of `uid`: true when it balances the caller's calls, so its publish goes.
    /// An Unmount with no count left (a repeat, or of a publish made before counting) ends the
    /// caller's use, as a caller with no count has at most one.
    pub fn unmount(&mut self, uid: &str) -> bool {
        match self.of(uid) {
            0 | 1 => {
                self.0.remove(uid);
                true
            }
            n => {
                self.0.insert(uid.to_string(), n - 1);
                false
            }
        }
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn docker_cp_on_a_running_container_keeps_its_publish() {
        let mut c = Counts::default();
        c.mount("x", false); // docker run: the first Mount publishes
        c.mount("x", true); // docker cp: Mount again with the same ID
        assert!(
            !c.unmount("x"),
            "the cp's Unmount leaves the container's use"
        );
        assert_eq!(c.of("x"), 1);
        assert!(c.unmount("x"), "docker stop's Unmount ends it");
        assert!(c.is_empty());
    }

    #[test]
    fn callers_are_counted_apart() {
        let mut c = Counts::default();
        c.mount("a", false);
        c.mount("b", false);
        c.mount("b", true);
        assert!(c.unmount("a"));
        assert!(!c.unmount("b"));
        assert_eq!((c.of("a"), c.of("b")), (0, 1));
        assert!(c.unmount("b"));
        assert!(c.is_empty());
    }

    #[test]
    fn a_publish_without_a_count_is_one_mount() {
        let mut c = Counts::default();
        c.mount("old", true);
        assert_eq!(c.of("old"), 2);
        assert!(!c.unmount("old"));
        assert!(c.unmount("old"));
        // An Unmount with nothing counted ends the caller's use (and repeats stay ended).
        assert!(c.unmount("old"));
        assert!(c.is_empty());
    }

    #[test]
    fn a_count_whose_publish_is_gone_starts_again_from_zero() {
        let mut c = Counts::default();
        c.mount("x", false);
        c.mount("x", true);
        c.mount("x", false); // the publish was unmounted under the count (a reboot)
        assert_eq!(c.of("x"), 1);
        assert!(c.unmount("x"));
    }

    #[test]
    fn counts_are_kept_as_a_json_object_by_caller() {
        let mut c = Counts::default();
        c.mount("a", false);
        c.mount("a", true);
        c.mount("b", false);
        let text = serde_json::to_string(&c).unwrap();
        assert_eq!(text, r#"{"a":2,"b":1}"#);
        assert_eq!(serde_json::from_str::<Counts>(&text).unwrap(), c);
    }
}
