//! The run's configuration as a results document records it (`config`): what was asked
//! and the rules it was measured by.
//!
//! Typed for every key osmeter writes, yet exact for every document ever written: each
//! key is optional (older documents lack `repeat` and `peer`; hand-made ones may lack
//! anything), and a key this build does not know, or whose value does not read back as
//! written (another type, a null where a value belongs), stays in `extra` untouched.
//! Writing merges the two into one sorted object, as `serde_json`'s map writes it, so a
//! document re-saves byte for byte.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

/// Takes `key` out of `map` when its value reads as a `T` that writes back the same.
fn take<T: Serialize + DeserializeOwned>(map: &mut Map<String, Value>, key: &str) -> Option<T> {
    let v = map.get(key)?;
    let t: T = serde_json::from_value(v.clone()).ok()?;
    if serde_json::to_value(&t).ok()? != *v {
        return None;
    }
    map.remove(key);
    Some(t)
}

/// A `config` object (or one inside it): its keys as `Option` fields (`None`: the key is
/// absent; for a field whose type is itself an `Option`, `Some(None)` is a written null),
/// plus `extra`.
macro_rules! record {
    ($(#[$m:meta])* pub struct $name:ident {
        $($(#[$fm:meta])* $field:ident: $ty:ty,)*
    }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Default, PartialEq)]
        pub struct $name {
            $($(#[$fm])* pub $field: Option<$ty>,)*
            /// Keys this build does not know, and known keys whose value does not read
            /// back as written, kept as they were.
            pub extra: Map<String, Value>,
        }

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                use serde::ser::Error;
                let mut map = self.extra.clone();
                $(if let Some(v) = &self.$field {
                    map.insert(
                        stringify!($field).into(),
                        serde_json::to_value(v).map_err(S::Error::custom)?,
                    );
                })*
                map.serialize(s)
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let mut extra = Map::<String, Value>::deserialize(d)?;
                Ok($name {
                    $($field: take(&mut extra, stringify!($field)),)*
                    extra,
                })
            }
        }
    };
}

record! {
    /// `config`: what the run was asked to do and how it was measured.
    pub struct RunRecord {
        /// The profile's name (smoke, quick, full).
        profile: String,
        /// `--only` and `--skip` patterns.
        only: Vec<String>,
        skip: Vec<String>,
        /// The CPU single-threaded work was pinned to.
        cpu: usize,
        /// Runs of each experiment (absent before `--repeat` existed: one).
        repeat: usize,
        options: RecordedOptions,
        /// The `--peer` host; null for the run's own loopback peer.
        peer: Option<PeerRecord>,
        statistics: Statistics,
    }
}

record! {
    /// `config.options`: the options experiments could read (never the peer token: a
    /// results folder may be shared; older documents may still hold one, kept in `extra`).
    pub struct RecordedOptions {
        peer: Option<String>,
        /// How reports and the history name this host (`--host-name`).
        host_name: String,
        /// How reports name the `--peer` host (`--peer-name`).
        peer_name: String,
        remote_dir: Option<String>,
        scratch_dir: Option<String>,
        drop_caches: bool,
        /// `--host-cache none`: the user asserted the VM's host does not cache its disk.
        host_cache_none: bool,
    }
}

record! {
    /// `config.peer`: the host the network experiments measured against.
    pub struct PeerRecord {
        /// The name given for it (`--peer-name`, else the `--peer` text).
        name: String,
        spec: String,
        /// The address it resolved to; null when it did not resolve.
        address: Option<String>,
        /// Its machine as it described itself (absent when it did not: `undescribed`).
        machine: PeerMachine,
        /// Why the peer's machine is not described (an older peer, or no answer).
        undescribed: String,
        /// This host's interface on the route to it, and that interface's link speed.
        local_nic: String,
        local_nic_speed_mbit_s: u64,
    }
}

record! {
    /// `config.peer.machine`: what the peer said of its machine, each key only where its
    /// system said (docs/PEER.md, "Describe").
    pub struct PeerMachine {
        hostname: String,
        cpu_model: String,
        logical_cpus: u64,
        physical_cores: u64,
        memory_bytes: u64,
        os: String,
        os_version: String,
        arch: String,
        /// The interface the run's connection reached it on, and its link speed and MTU.
        nic: String,
        nic_speed_mbit_s: u64,
        nic_mtu: u64,
        /// What it could not tell, and why.
        notes: Vec<String>,
    }
}

record! {
    /// `config.statistics`: the rules behind every summary in the document.
    pub struct Statistics {
        outlier_rule: String,
        ci_method: String,
        /// The profile's harness configuration, as `Debug` prints it.
        harness: String,
    }
}

impl RunRecord {
    /// The profile's name, "?" when not recorded.
    pub fn profile_name(&self) -> &str {
        self.profile.as_deref().unwrap_or("?")
    }

    /// Runs of each experiment (one when not recorded).
    pub fn repeats(&self) -> usize {
        self.repeat.unwrap_or(1)
    }

    /// The `--peer` host, when the network experiments measured against one.
    pub fn peer(&self) -> Option<&PeerRecord> {
        self.peer.as_ref()?.as_ref()
    }

    /// `--host-name`, when given.
    pub fn host_name(&self) -> Option<&str> {
        self.options.as_ref()?.host_name.as_deref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(text: &str) -> RunRecord {
        let r: RunRecord = serde_json::from_str(text).unwrap();
        let v: Value = serde_json::from_str(text).unwrap();
        assert_eq!(
            serde_json::to_string(&r).unwrap(),
            serde_json::to_string(&v).unwrap()
        );
        r
    }

    #[test]
    fn every_key_round_trips_as_written() {
        // As today's osmeter writes it.
        let r = round_trip(
            r#"{"cpu":1,"only":[],"options":{"drop_caches":false,"peer":null,"remote_dir":null,
            "scratch_dir":null},"peer":null,"profile":"smoke","repeat":1,"skip":[],
            "statistics":{"ci_method":"c","harness":"h","outlier_rule":"o"}}"#,
        );
        assert_eq!(r.profile_name(), "smoke");
        assert_eq!(r.cpu, Some(1));
        assert_eq!(r.peer, Some(None));
        assert!(r.peer().is_none() && r.extra.is_empty());
        assert_eq!(r.options.as_ref().unwrap().peer, Some(None));
        // Older: no repeat, no peer, a peer token among the options.
        let r = round_trip(
            r#"{"cpu":1,"only":["cpu.*"],"options":{"drop_caches":false,"peer":null,
            "peer_token":"s","remote_dir":null,"scratch_dir":null},"profile":"quick","skip":[]}"#,
        );
        assert_eq!((r.repeat, r.repeats(), r.peer), (None, 1, None));
        assert_eq!(r.options.as_ref().unwrap().extra["peer_token"], "s");
        // A remote peer and a host name.
        let r = round_trip(
            r#"{"options":{"host_name":"a","peer":"b:1","peer_name":"b"},
            "peer":{"address":null,"name":"b","spec":"b:1"}}"#,
        );
        assert_eq!(r.host_name(), Some("a"));
        assert_eq!(r.peer().unwrap().name.as_deref(), Some("b"));
        assert_eq!(r.peer().unwrap().address, Some(None));
    }

    #[test]
    fn values_of_another_type_and_unknown_keys_are_kept() {
        let r = round_trip(r#"{"cpu":1.0,"profile":null,"repeat":-1,"zeta":{"x":[1,2]},"a":3}"#);
        assert_eq!((r.cpu, r.repeat, r.profile_name()), (None, None, "?"));
        assert_eq!(r.extra.len(), 5);
        assert_eq!(round_trip("{}"), RunRecord::default());
        assert!(serde_json::from_str::<RunRecord>("[1]").is_err());
    }
}
