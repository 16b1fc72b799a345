//! The local history of runs: one SQLite database (WAL mode, with a busy timeout so
//! that concurrent runs both land). `runs` holds one row per run with the whole results
//! document; `metrics` holds one row per metric beside it, so that a fleet can be queried
//! with plain SQL. Runs are identified by `run_key` (host, start time, duration), so
//! recording or importing the same run twice keeps one copy.
//!
//! Schema versions (`PRAGMA user_version`): 0 = `runs` only (osmeter before the metrics
//! table); 1 = `runs.run_key` and `metrics`. Opening a version-0 database migrates it in
//! one transaction, filling `metrics` from the stored documents.

pub(crate) mod changes;
pub(crate) mod why;

use crate::results::{RunResults, Status};
use anyhow::Context;
use rusqlite::{params, Connection, OptionalExtension};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Environment variable that points the history at another database file (tests).
pub const ENV_DB: &str = "OSMETER_HISTORY_DB";

/// Where the history lives: $OSMETER_HISTORY_DB, else $XDG_DATA_HOME/osmeter/history.sqlite,
/// else ~/.local/share/osmeter/history.sqlite.
pub fn default_path() -> anyhow::Result<PathBuf> {
    let nonempty = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty());
    if let Some(p) = nonempty(ENV_DB) {
        return Ok(PathBuf::from(p));
    }
    let data = match nonempty("XDG_DATA_HOME") {
        Some(d) if Path::new(&d).is_absolute() => PathBuf::from(d),
        _ => PathBuf::from(nonempty("HOME").context("neither XDG_DATA_HOME nor HOME is set")?)
            .join(".local/share"),
    };
    Ok(data.join("osmeter").join("history.sqlite"))
}

/// One run as listed.
#[derive(Debug, Clone, serde::Serialize)]
pub struct RunRow {
    pub id: i64,
    pub started_at: String,
    pub host: String,
    pub profile: String,
    pub experiments: i64,
    pub duration_s: f64,
    pub folder: Option<String>,
}

pub struct History {
    conn: Connection,
    pub path: PathBuf,
}

/// The schema version this build writes (`PRAGMA user_version`).
pub const SCHEMA_VERSION: i64 = 1;

const CREATE_RUNS: &str = "CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    started_at TEXT NOT NULL,
    recorded_at TEXT NOT NULL,
    host TEXT NOT NULL,
    profile TEXT NOT NULL,
    experiments INTEGER NOT NULL,
    duration_s REAL NOT NULL,
    tool_version TEXT NOT NULL,
    schema_version INTEGER NOT NULL,
    folder TEXT,
    results TEXT NOT NULL
);";

const CREATE_METRICS: &str = "CREATE TABLE IF NOT EXISTS metrics (
    run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    host TEXT NOT NULL,
    experiment TEXT NOT NULL,
    metric TEXT NOT NULL,
    unit TEXT NOT NULL,
    median REAL,
    ci_low REAL,
    ci_high REAL,
    n INTEGER NOT NULL,
    status TEXT NOT NULL,
    PRIMARY KEY (run_id, experiment, metric)
);
CREATE INDEX IF NOT EXISTS metrics_by_metric ON metrics (experiment, metric);";

/// What `record` did with a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recorded {
    New(i64),
    /// The same run (same `run_key`) was already there, under this id.
    AlreadyPresent(i64),
}

impl Recorded {
    #[cfg(test)]
    pub fn id(self) -> i64 {
        match self {
            Recorded::New(id) | Recorded::AlreadyPresent(id) => id,
        }
    }
}

/// What identifies a run wherever its results travel: the host (its given name and its
/// hostname), the start time (to the second) and the duration (to the microsecond).
pub fn run_key(r: &RunResults) -> String {
    let hostname = Some(r.machine.hostname.as_str())
        .filter(|h| !h.is_empty())
        .unwrap_or("?");
    format!(
        "{}|{}|{}|{:.6}",
        r.host_name(),
        hostname,
        r.started_at,
        r.duration_s
    )
}

fn finite(x: f64) -> Option<f64> {
    x.is_finite().then_some(x)
}

impl History {
    /// Opens (creating or migrating when needed) the database at `path`.
    pub fn open(path: &Path) -> anyhow::Result<History> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("cannot create {}", dir.display()))?;
        }
        let conn = Connection::open(path)
            .with_context(|| format!("cannot open history {}", path.display()))?;
        // The timeout first: switching to WAL and creating the table may meet a lock.
        conn.busy_timeout(Duration::from_secs(30))?;
        let mode: String = conn
            .query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))
            .with_context(|| format!("{} is not a usable SQLite database", path.display()))?;
        if !mode.eq_ignore_ascii_case("wal") {
            anyhow::bail!("{}: cannot switch to WAL mode (got {mode})", path.display());
        }
        conn.execute_batch("PRAGMA foreign_keys = ON;")?;
        let mut h = History {
            conn,
            path: path.to_path_buf(),
        };
        h.migrate()
            .with_context(|| format!("{}: cannot bring the history up to date", path.display()))?;
        Ok(h)
    }

    pub fn open_default() -> anyhow::Result<History> {
        History::open(&default_path()?)
    }

    /// Brings the schema to `SCHEMA_VERSION`. One IMMEDIATE transaction, so that two
    /// processes opening an old database at once migrate it once.
    fn migrate(&mut self) -> anyhow::Result<()> {
        let version: i64 = self
            .conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))?;
        if version == SCHEMA_VERSION {
            return Ok(());
        }
        if version > SCHEMA_VERSION {
            anyhow::bail!(
                "history schema version {version} is newer than this osmeter knows ({SCHEMA_VERSION}); use a newer osmeter"
            );
        }
        let tx = self
            .conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        // Re-read under the lock: another process may have migrated meanwhile.
        let version: i64 = tx.query_row("PRAGMA user_version", [], |r| r.get(0))?;
        if version < 1 {
            tx.execute_batch(CREATE_RUNS)?;
            let has_key = tx
                .prepare("SELECT 1 FROM pragma_table_info('runs') WHERE name = 'run_key'")?
                .exists([])?;
            if !has_key {
                tx.execute_batch("ALTER TABLE runs ADD COLUMN run_key TEXT")?;
            }
            tx.execute_batch(CREATE_METRICS)?;
            // Fill run_key and metrics from the documents already stored. A row whose
            // document this build cannot read keeps a null key and no metrics.
            let stored: Vec<(i64, String)> = tx
                .prepare("SELECT id, results FROM runs ORDER BY id")?
                .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
                .collect::<Result<_, _>>()?;
            let mut seen = std::collections::HashSet::new();
            for (id, text) in stored {
                let Ok(r) = crate::results::load::from_str(&text) else {
                    continue;
                };
                let key = run_key(&r);
                if seen.insert(key.clone()) {
                    tx.execute(
                        "UPDATE runs SET run_key = ?1 WHERE id = ?2",
                        params![key, id],
                    )?;
                }
                insert_metrics(&tx, id, &r)?;
            }
            tx.execute_batch(
                "CREATE UNIQUE INDEX IF NOT EXISTS runs_by_key ON runs (run_key);
                 PRAGMA user_version = 1;",
            )?;
        }
        tx.commit()?;
        Ok(())
    }

    /// Records a run with its metrics, unless the same run is already there.
    pub fn record(&mut self, r: &RunResults, folder: Option<&Path>) -> anyhow::Result<Recorded> {
        let json = serde_json::to_string(r)?;
        let key = run_key(r);
        let profile = r.config.profile_name();
        let tx = self
            .conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        let existing: Option<i64> = tx
            .query_row("SELECT id FROM runs WHERE run_key = ?1", [&key], |r| {
                r.get(0)
            })
            .optional()?;
        if let Some(id) = existing {
            return Ok(Recorded::AlreadyPresent(id));
        }
        tx.execute(
            "INSERT INTO runs (started_at, recorded_at, host, profile, experiments, duration_s,
                               tool_version, schema_version, folder, results, run_key)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
            params![
                r.started_at,
                crate::results::rfc3339(std::time::SystemTime::now()),
                r.host_name(),
                profile,
                r.experiments.len() as i64,
                r.duration_s,
                r.tool.version,
                r.schema_version,
                folder.map(|f| f
                    .canonicalize()
                    .unwrap_or_else(|_| f.to_path_buf())
                    .display()
                    .to_string()),
                json,
                key,
            ],
        )?;
        let id = tx.last_insert_rowid();
        insert_metrics(&tx, id, r)?;
        tx.commit()?;
        Ok(Recorded::New(id))
    }

    /// Every run, oldest first.
    pub fn list(&self) -> anyhow::Result<Vec<RunRow>> {
        let mut st = self.conn.prepare(
            "SELECT id, started_at, host, profile, experiments, duration_s, folder FROM runs ORDER BY id",
        )?;
        let rows = st
            .query_map([], |r| {
                Ok(RunRow {
                    id: r.get(0)?,
                    started_at: r.get(1)?,
                    host: r.get(2)?,
                    profile: r.get(3)?,
                    experiments: r.get(4)?,
                    duration_s: r.get(5)?,
                    folder: r.get(6)?,
                })
            })?
            .collect::<Result<Vec<_>, _>>()?;
        Ok(rows)
    }

    /// Up to `limit` most recent runs of this host, profile and osmeter version, leaving
    /// out runs started at any of `exclude_started` (the runs being compared). Runs that
    /// no longer load are left out.
    pub fn earlier_runs(
        &self,
        host: &str,
        profile: &str,
        version: &str,
        exclude_started: &[&str],
        limit: usize,
    ) -> anyhow::Result<Vec<RunResults>> {
        let mut st = self.conn.prepare(
            "SELECT started_at, results FROM runs WHERE host = ?1 AND profile = ?2 AND tool_version = ?3 ORDER BY id DESC",
        )?;
        let rows = st.query_map(params![host, profile, version], |r| {
            Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?))
        })?;
        let mut out = Vec::new();
        for row in rows {
            let (started, text) = row?;
            if exclude_started.contains(&started.as_str()) {
                continue;
            }
            if let Ok(r) = crate::results::load::from_str(&text) {
                out.push(r);
            }
            if out.len() >= limit {
                break;
            }
        }
        Ok(out)
    }

    /// The results document of a run, read with the schema-version dispatch.
    pub fn get(&self, id: i64) -> anyhow::Result<Option<RunResults>> {
        let text: Option<String> = self
            .conn
            .query_row("SELECT results FROM runs WHERE id = ?1", [id], |r| r.get(0))
            .optional()?;
        match text {
            None => Ok(None),
            Some(t) => crate::results::load::from_str(&t)
                .map(Some)
                .map_err(|e| anyhow::anyhow!("history run {id}: {e}")),
        }
    }
}

/// What a machine is, for telling a change of level from a change of machine: the CPU
/// model, its logical CPUs and the memory size (GiB), as a short FNV-1a hash and as text.
/// Runs of one host name on different hardware (a replaced instance) are different series.
pub fn fingerprint(r: &RunResults) -> (String, String) {
    let text = r.machine_fingerprint();
    let mut h: u32 = 0x811c_9dc5;
    for b in text.bytes() {
        h = (h ^ b as u32).wrapping_mul(0x0100_0193);
    }
    (format!("{h:08x}"), text)
}

/// One recorded figure of a series.
#[derive(Debug, Clone, serde::Serialize)]
pub struct SeriesPoint {
    pub run: i64,
    pub started_at: String,
    pub value: f64,
}

/// The runs of one metric on one host, machine (fingerprint) and profile, oldest first.
#[derive(Debug, Clone, serde::Serialize)]
pub struct MetricSeries {
    pub host: String,
    pub fingerprint: String,
    pub machine: String,
    pub profile: String,
    pub experiment: String,
    pub metric: String,
    pub unit: String,
    pub points: Vec<SeriesPoint>,
}

impl History {
    /// Every metric's series, from the stored documents (the fingerprint needs the
    /// machine), for `host` or every host, for metrics whose `experiment/metric` or
    /// experiment id matches `pattern`. Only figures of experiments that ran ok count, or
    /// whose premise could not be checked here (unverified, as a VM's uncached reads
    /// always are: their series would otherwise be empty there);
    /// runs whose document no longer loads are left out. Ordered by start time.
    pub fn series(
        &self,
        host: Option<&str>,
        pattern: Option<&glob::Pattern>,
    ) -> anyhow::Result<Vec<MetricSeries>> {
        let mut st = self.conn.prepare(
            "SELECT id, results FROM runs WHERE ?1 IS NULL OR host = ?1 ORDER BY started_at, id",
        )?;
        let rows = st.query_map([host], |r| {
            Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?))
        })?;
        let mut out: std::collections::BTreeMap<
            (String, String, String, String, String),
            MetricSeries,
        > = Default::default();
        for row in rows {
            let (id, text) = row?;
            let Ok(r) = crate::results::load::from_str(&text) else {
                continue;
            };
            let (fp, machine) = fingerprint(&r);
            let profile = r.config.profile_name();
            let counted = |e: &&crate::results::ExperimentResult| {
                matches!(e.status, Status::Ok | Status::Unverified)
            };
            for e in r.experiments.iter().filter(counted) {
                for m in &e.metrics {
                    let path = format!("{}/{}", e.id, m.name);
                    if pattern.is_some_and(|p| !p.matches(&path) && !p.matches(&e.id)) {
                        continue;
                    }
                    if !m.summary.median.is_finite() {
                        continue;
                    }
                    let key = (
                        r.host_name().to_string(),
                        fp.clone(),
                        profile.to_string(),
                        e.id.clone(),
                        format!("{}\u{0}{}", m.name, m.unit),
                    );
                    out.entry(key)
                        .or_insert_with(|| MetricSeries {
                            host: r.host_name().to_string(),
                            fingerprint: fp.clone(),
                            machine: machine.clone(),
                            profile: profile.to_string(),
                            experiment: e.id.clone(),
                            metric: m.name.clone(),
                            unit: m.unit.clone(),
                            points: Vec::new(),
                        })
                        .points
                        .push(SeriesPoint {
                            run: id,
                            started_at: r.started_at.clone(),
                            value: m.summary.median,
                        });
                }
            }
        }
        Ok(out.into_values().collect())
    }
}

/// One `metrics` row per metric of the run.
fn insert_metrics(tx: &rusqlite::Transaction, run_id: i64, r: &RunResults) -> anyhow::Result<()> {
    let mut st = tx.prepare_cached(
        "INSERT OR IGNORE INTO metrics (run_id, host, experiment, metric, unit, median, ci_low,
                                        ci_high, n, status)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
    )?;
    for e in &r.experiments {
        for m in &e.metrics {
            st.execute(params![
                run_id,
                r.host_name(),
                e.id,
                m.name,
                m.unit,
                finite(m.summary.median),
                finite(m.summary.ci95[0]),
                finite(m.summary.ci95[1]),
                m.summary.n as i64,
                e.status.as_str(),
            ])?;
        }
    }
    Ok(())
}

/// The results files under `path`: the file itself, the folder's results.json, or every
/// results.json below a folder of folders (a fleet's collected results), in path order.
pub fn results_files(path: &Path) -> Result<Vec<PathBuf>, String> {
    let meta = std::fs::metadata(path).map_err(|e| format!("{}: {e}", path.display()))?;
    if meta.is_file() {
        return Ok(vec![path.to_path_buf()]);
    }
    let here = path.join("results.json");
    if here.is_file() {
        return Ok(vec![here]);
    }
    let mut found = Vec::new();
    let mut stack = vec![(path.to_path_buf(), 0)];
    while let Some((dir, depth)) = stack.pop() {
        let rd = std::fs::read_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        for entry in rd.flatten() {
            let p = entry.path();
            // Symbolic links are not followed: a loop must not make the walk endless.
            let Ok(ft) = entry.file_type() else { continue };
            if ft.is_dir() && depth < 8 {
                stack.push((p, depth + 1));
            } else if ft.is_file() && p.file_name().is_some_and(|n| n == "results.json") {
                found.push(p);
            }
        }
    }
    found.sort();
    if found.is_empty() {
        return Err(format!(
            "{}: no results.json in this folder or below it",
            path.display()
        ));
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc(host: &str) -> RunResults {
        crate::results::load::from_str(&format!(
            r#"{{"schema_version":1,"tool":{{"name":"osmeter","version":"0"}},"started_at":"2026-01-01T00:00:00Z",
               "duration_s":1.5,"config":{{"profile":"smoke"}},"machine":{{"hostname":"{host}"}},"experiments":[]}}"#
        ))
        .unwrap()
    }

    #[test]
    fn record_list_get() {
        let d = tempfile::tempdir().unwrap();
        let mut h = History::open(&d.path().join("sub/h.sqlite")).unwrap();
        let a = h.record(&doc("a"), None).unwrap().id();
        let b = h.record(&doc("b"), Some(Path::new("/x"))).unwrap().id();
        assert!(b > a);
        let l = h.list().unwrap();
        assert_eq!(l.len(), 2);
        assert_eq!(l[1].host, "b");
        assert_eq!(l[1].folder.as_deref(), Some("/x"));
        assert_eq!(l[0].profile, "smoke");
        let r = h.get(a).unwrap().unwrap();
        assert_eq!(r.machine.hostname, "a");
        assert!(h.get(999).unwrap().is_none());
    }

    fn with_metric(host: &str, median: f64) -> RunResults {
        let mut r = doc(host);
        r.experiments = crate::results::load::from_str(&format!(
            r#"{{"schema_version":1,"tool":{{"name":"osmeter","version":"0"}},"started_at":"x","duration_s":1,
               "config":{{}},"machine":{{}},"experiments":[{{"id":"cpu.syscall","area":"cpu","title":"t",
               "status":"ok","duration_s":1,"metrics":[{{"name":"getppid","unit":"ns","summary":
               {{"n":5,"median":{median},"mean":1,"stddev":0,"min":1,"max":1,"ci95":[1,2],"cov":0,"outliers":0}}}}]}}]}}"#
        ))
        .unwrap()
        .experiments;
        r
    }

    fn count(h: &History, sql: &str) -> i64 {
        h.conn.query_row(sql, [], |r| r.get(0)).unwrap()
    }

    #[test]
    fn the_same_run_twice_is_kept_once_with_one_row_per_metric() {
        let d = tempfile::tempdir().unwrap();
        let mut h = History::open(&d.path().join("h.sqlite")).unwrap();
        let r = with_metric("a", 80.0);
        let first = h.record(&r, None).unwrap();
        assert!(matches!(first, Recorded::New(_)));
        assert_eq!(
            h.record(&r, None).unwrap(),
            Recorded::AlreadyPresent(first.id())
        );
        assert!(matches!(
            h.record(&with_metric("b", 90.0), None).unwrap(),
            Recorded::New(_)
        ));
        assert_eq!(h.list().unwrap().len(), 2);
        assert_eq!(count(&h, "SELECT count(*) FROM metrics"), 2);
        let (host, median): (String, f64) = h
            .conn
            .query_row(
                "SELECT host, median FROM metrics WHERE experiment='cpu.syscall' AND metric='getppid' AND host='b'",
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .unwrap();
        assert_eq!((host.as_str(), median), ("b", 90.0));
    }

    #[test]
    fn a_database_from_before_the_metrics_table_is_migrated() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("old.sqlite");
        {
            // The version-0 layout, with two runs in it.
            let c = Connection::open(&p).unwrap();
            c.execute_batch(CREATE_RUNS).unwrap();
            for host in ["a", "b"] {
                c.execute(
                    "INSERT INTO runs (started_at, recorded_at, host, profile, experiments, duration_s,
                                       tool_version, schema_version, folder, results)
                     VALUES ('t', 't', ?1, 'smoke', 1, 1.5, '0', 1, NULL, ?2)",
                    params![host, serde_json::to_string(&with_metric(host, 70.0)).unwrap()],
                )
                .unwrap();
            }
            c.execute(
                "INSERT INTO runs (started_at, recorded_at, host, profile, experiments, duration_s,
                                   tool_version, schema_version, folder, results)
                 VALUES ('t', 't', 'c', 'smoke', 0, 1, '0', 1, NULL, 'not json')",
                [],
            )
            .unwrap();
        }
        let mut h = History::open(&p).unwrap();
        assert_eq!(count(&h, "PRAGMA user_version"), SCHEMA_VERSION);
        assert_eq!(count(&h, "SELECT count(*) FROM metrics"), 2);
        assert_eq!(
            count(&h, "SELECT count(*) FROM runs WHERE run_key IS NULL"),
            1
        );
        // The migrated runs are known: recording them again adds nothing.
        assert!(matches!(
            h.record(&with_metric("a", 70.0), None).unwrap(),
            Recorded::AlreadyPresent(1)
        ));
        drop(h);
        // Opening again is a no-op.
        let h = History::open(&p).unwrap();
        assert_eq!(h.list().unwrap().len(), 3);
        assert_eq!(count(&h, "SELECT count(*) FROM metrics"), 2);
    }

    #[test]
    fn results_files_finds_a_fleet_folder() {
        let d = tempfile::tempdir().unwrap();
        for h in ["h2", "h1"] {
            std::fs::create_dir_all(d.path().join(h).join("plots")).unwrap();
            std::fs::write(d.path().join(h).join("results.json"), "{}").unwrap();
        }
        let f = results_files(d.path()).unwrap();
        assert_eq!(f.len(), 2);
        assert!(f[0].ends_with("h1/results.json"));
        assert_eq!(results_files(&d.path().join("h1")).unwrap().len(), 1);
        std::fs::create_dir(d.path().join("empty")).unwrap();
        assert!(results_files(&d.path().join("empty")).is_err());
        assert!(results_files(&d.path().join("missing")).is_err());
    }

    #[test]
    fn earlier_runs_of_the_same_host_profile_and_version() {
        let d = tempfile::tempdir().unwrap();
        let mut h = History::open(&d.path().join("h.sqlite")).unwrap();
        let mut a = doc("a");
        for t in ["01", "02", "03", "04"] {
            a.started_at = format!("2026-01-01T00:00:{t}Z");
            h.record(&a, None).unwrap();
        }
        h.record(&doc("b"), None).unwrap();
        let mut other = doc("a");
        other.tool.version = "9".into();
        h.record(&other, None).unwrap();
        let got = h
            .earlier_runs("a", "smoke", "0", &["2026-01-01T00:00:04Z"], 10)
            .unwrap();
        let started: Vec<&str> = got.iter().map(|r| r.started_at.as_str()).collect();
        assert_eq!(
            started,
            [
                "2026-01-01T00:00:03Z",
                "2026-01-01T00:00:02Z",
                "2026-01-01T00:00:01Z"
            ]
        );
        assert_eq!(h.earlier_runs("a", "smoke", "0", &[], 2).unwrap().len(), 2);
        assert!(h
            .earlier_runs("a", "quick", "0", &[], 9)
            .unwrap()
            .is_empty());
    }

    #[test]
    fn a_garbage_file_is_an_error_not_a_panic() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("h.sqlite");
        std::fs::write(
            &p,
            b"this is not a database, just some text that is long enough",
        )
        .unwrap();
        assert!(History::open(&p).is_err());
    }
}
