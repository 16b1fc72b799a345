//! The local history of runs: one SQLite database (WAL mode, with a busy timeout so
//! that concurrent runs both land), one row per run holding the whole results document.

use crate::results::RunResults;
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

impl History {
    /// Opens (creating when needed) the database at `path`.
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
        conn.execute_batch(
            "CREATE TABLE IF NOT EXISTS runs (
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
            );",
        )
        .with_context(|| format!("{}: cannot create the runs table", path.display()))?;
        Ok(History {
            conn,
            path: path.to_path_buf(),
        })
    }

    pub fn open_default() -> anyhow::Result<History> {
        History::open(&default_path()?)
    }

    /// Records a run; returns its id.
    pub fn record(&self, r: &RunResults, folder: Option<&Path>) -> anyhow::Result<i64> {
        let json = serde_json::to_string(r)?;
        let host = r
            .machine
            .get("hostname")
            .and_then(|h| h.as_str())
            .unwrap_or("?");
        let profile = r
            .config
            .get("profile")
            .and_then(|p| p.as_str())
            .unwrap_or("?");
        self.conn.execute(
            "INSERT INTO runs (started_at, recorded_at, host, profile, experiments, duration_s,
                               tool_version, schema_version, folder, results)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
            params![
                r.started_at,
                crate::results::rfc3339(std::time::SystemTime::now()),
                host,
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
                json
            ],
        )?;
        Ok(self.conn.last_insert_rowid())
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
            if let Ok(r) = crate::report::load::from_str(&text) {
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
            Some(t) => crate::report::load::from_str(&t)
                .map(Some)
                .map_err(|e| anyhow::anyhow!("history run {id}: {e}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc(host: &str) -> RunResults {
        crate::report::load::from_str(&format!(
            r#"{{"schema_version":1,"tool":{{"name":"osmeter","version":"0"}},"started_at":"2026-01-01T00:00:00Z",
               "duration_s":1.5,"config":{{"profile":"smoke"}},"machine":{{"hostname":"{host}"}},"experiments":[]}}"#
        ))
        .unwrap()
    }

    #[test]
    fn record_list_get() {
        let d = tempfile::tempdir().unwrap();
        let h = History::open(&d.path().join("sub/h.sqlite")).unwrap();
        let a = h.record(&doc("a"), None).unwrap();
        let b = h.record(&doc("b"), Some(Path::new("/x"))).unwrap();
        assert!(b > a);
        let l = h.list().unwrap();
        assert_eq!(l.len(), 2);
        assert_eq!(l[1].host, "b");
        assert_eq!(l[1].folder.as_deref(), Some("/x"));
        assert_eq!(l[0].profile, "smoke");
        let r = h.get(a).unwrap().unwrap();
        assert_eq!(r.machine["hostname"], "a");
        assert!(h.get(999).unwrap().is_none());
    }

    #[test]
    fn earlier_runs_of_the_same_host_profile_and_version() {
        let d = tempfile::tempdir().unwrap();
        let h = History::open(&d.path().join("h.sqlite")).unwrap();
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
