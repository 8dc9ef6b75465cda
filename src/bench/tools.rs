//! The tools workload (SPEC §2.10): what a running agent waits for when it
//! reaches its memory over HTTP — a search over a 1 MiB `MEMORY.md` and
//! 1,000 rollout summaries, a read, and an edit on an idle lane, from the
//! request to the published files.

use super::{Bench, BenchResult, Figure, figure, percentile};
use serde_json::json;
use std::time::Instant;

const WORKSPACE: &str = "tools";

impl Bench {
    /// Writes the folder the searches run over: `MEMORY.md` of about
    /// `memory_bytes` and `summaries` rollout summaries of about 1 KiB — on
    /// the volume, or in the bucket as one publish made current.
    async fn seed_memory_folder(&self, memory_bytes: usize, summaries: usize) -> BenchResult<()> {
        let workspace = crate::domain::ids::WorkspaceName::parse(WORKSPACE).ok_or("bad workspace name")?;
        let files = memory_folder(memory_bytes, summaries);
        let state = &self.server.state;
        let Some(bucket) = state.volumes.bucket() else {
            let memories = state.volumes.workspace_root(self.tenant, &workspace)?.join("memories");
            std::fs::create_dir_all(memories.join("rollout_summaries"))?;
            for (path, text) in files {
                std::fs::write(memories.join(path), text)?;
            }
            return Ok(());
        };
        let mut changes = crate::workspace::publish::FileChanges::default();
        for (path, text) in files {
            changes.write(format!("memories/{path}"), text);
        }
        let staged = bucket.stage_versions(self.tenant, &workspace, changes).await?;
        state.store.record_versions(self.tenant, &workspace, &staged).await?;
        bucket.do_chores(state.store.as_ref(), self.tenant, &workspace).await?;
        Ok(())
    }

    /// `requests` GETs of `path`: `(p50, p99)` latency in ms.
    async fn timed_gets(&self, paths: &[String]) -> BenchResult<(f64, f64)> {
        let mut times = Vec::with_capacity(paths.len());
        for path in paths {
            times.push(self.timed_get(path).await?);
        }
        times.sort_by(f64::total_cmp);
        Ok((percentile(&times, 0.5), percentile(&times, 0.99)))
    }

    pub(super) async fn tools(
        &self,
        memory_bytes: usize,
        summaries: usize,
        requests: usize,
    ) -> BenchResult<Vec<Figure>> {
        self.segment("tools-seed", WORKSPACE, "seed", "seed").await?;
        self.seed_memory_folder(memory_bytes, summaries).await?;
        let base = format!("/v1/workspaces/{WORKSPACE}/layouts/default/memory");
        let case = format!("{} KiB MEMORY.md + {summaries} summaries", memory_bytes / 1024);
        let mut figures = Vec::new();
        if self.server.state.embeddings.is_some() {
            figures.extend(self.indexing_cost(&base, &case).await?);
        }
        type Probe<'a> = (&'a str, Box<dyn Fn(usize) -> String + 'a>);
        let mut probes: Vec<Probe> = vec![
            ("search, a plain word", Box::new(|i| format!("{base}/search?query=cache-{}", i * 7 % 500))),
            (
                "search by relevance (mode=ranked)",
                Box::new(|i| {
                    format!("{base}/search?query=which%20cache%20key%20for%20cache-{}&mode=ranked", i * 7 % 500)
                }),
            ),
            (
                "search, a regex",
                Box::new(|i| format!("{base}/search?query=TOOLS-{}%5Cb&regex=true", i % summaries.max(1))),
            ),
            (
                "read MEMORY.md, 100 lines",
                Box::new(|i| format!("{base}/read?path=MEMORY.md&offset={}&limit=100", 1 + i * 13 % 2000)),
            ),
            (
                "read a rollout summary",
                Box::new(|i| format!("{base}/read?path=rollout_summaries/r{:05}_deploy.md", i % summaries.max(1))),
            ),
        ];
        let base = base.as_str();
        if self.server.state.embeddings.is_some() {
            for mode in ["semantic", "hybrid"] {
                probes.push((
                    if mode == "semantic" {
                        "search by meaning (mode=semantic)"
                    } else {
                        "search by both (mode=hybrid)"
                    },
                    Box::new(move |i| {
                        format!("{base}/search?query=which%20cache%20key%20for%20cache-{}&mode={mode}", i * 7 % 500)
                    }),
                ));
            }
        }
        for (what, path) in &probes {
            let (mut p50s, mut p99s) = (Vec::new(), Vec::new());
            for _ in 0..self.runs {
                let paths: Vec<String> = (0..requests).map(path).collect();
                let (p50, p99) = self.timed_gets(&paths).await?;
                p50s.push(p50);
                p99s.push(p99);
            }
            figures.push(figure("tools", self.backend, format!("{case}: {what}"), "latency p50", "ms", p50s));
            figures.push(figure("tools", self.backend, format!("{case}: {what}"), "latency p99", "ms", p99s));
        }
        figures.extend(self.mcp_latency(base, summaries, requests).await?);
        figures.extend(self.edit_latency(base, requests).await?);
        Ok(figures)
    }

    /// The same read of a rollout summary, and the same search of a plain
    /// word, as a plain GET and as an MCP `tools/call`, alternating, each
    /// from the request to its whole answer.
    async fn mcp_latency(&self, base: &str, summaries: usize, requests: usize) -> BenchResult<Vec<Figure>> {
        let mut times: [Vec<f64>; 4] = Default::default();
        for i in 0..requests * self.runs {
            let path = format!("rollout_summaries/r{:05}_deploy.md", i % summaries.max(1));
            let word = format!("cache-{}", i * 7 % 500);
            let calls = [
                (format!("{base}/read?path={path}"), json!({"name": "memory_read", "arguments": {"path": path}})),
                (format!("{base}/search?query={word}"), json!({"name": "memory_search", "arguments": {"query": word}})),
            ];
            for (k, (route, tool)) in calls.into_iter().enumerate() {
                times[2 * k].push(self.timed_get(&route).await?);
                times[2 * k + 1].push(self.timed_tool_call(i, tool).await?);
            }
        }
        let mut figures = Vec::new();
        let cases = ["read a rollout summary, plain route", "read a rollout summary, MCP tools/call"]
            .into_iter()
            .chain(["search a plain word, plain route", "search a plain word, MCP tools/call"]);
        for (case, mut times) in cases.zip(times) {
            times.sort_by(f64::total_cmp);
            for (what, q) in [("round trip p50", 0.5), ("round trip p99", 0.99)] {
                figures.push(figure("tools", self.backend, case.to_owned(), what, "ms", vec![percentile(&times, q)]));
            }
        }
        Ok(figures)
    }

    /// What embedding costs (the fake embedder, in this process): the whole
    /// seeded folder indexed once (its first search by meaning marks it, a
    /// sweep takes it up within two seconds), then a publish that changes one section
    /// of `MEMORY.md` — from the request to the last vector stored — with
    /// the passages embedded and the endpoint's calls.
    async fn indexing_cost(&self, base: &str, case: &str) -> BenchResult<Vec<Figure>> {
        let calls_before = self.fake.embedding_calls();
        let started = Instant::now();
        self.all_embedded(base).await?;
        let whole = started.elapsed().as_secs_f64() * 1000.0;
        let passages = self.passages_searched(base).await?;
        let calls = self.fake.embedding_calls()[calls_before.len()..]
            .iter()
            .filter(|c| c.len() > 1 || c[0].contains('\n'))
            .count();
        let mut figures = vec![
            figure("tools", self.backend, format!("{case}: index it all"), "passages", "count", vec![passages as f64]),
            figure(
                "tools",
                self.backend,
                format!("{case}: index it all"),
                "embedding calls",
                "count",
                vec![calls as f64],
            ),
            figure("tools", self.backend, format!("{case}: index it all"), "time", "ms", vec![whole]),
        ];
        let (mut times, mut embedded, mut calls) = (Vec::new(), Vec::new(), Vec::new());
        for run in 0..self.runs.max(3) {
            let before = self.fake.embedding_calls().len();
            let edit = json!({"operations": [{"command": "str_replace", "path": "MEMORY.md",
                "old_str": format!("## Task {run}: deploy service-{run} "), "new_str": format!("## Task {run}: ship service-{run} ")}]});
            let started = Instant::now();
            let (status, answer) = self.post(&format!("{base}/edits"), &edit).await?;
            if status != 200 {
                return Err(format!("an edit answered {status}: {answer}").into());
            }
            self.all_embedded(base).await?;
            times.push(started.elapsed().as_secs_f64() * 1000.0);
            let indexing: Vec<Vec<String>> = self.fake.embedding_calls()[before..]
                .iter()
                .filter(|c| c.len() > 1 || c[0].contains('\n'))
                .cloned()
                .collect();
            calls.push(indexing.len() as f64);
            embedded.push(indexing.iter().map(Vec::len).sum::<usize>() as f64);
        }
        let what = format!("{case}: a publish changing one section");
        figures.push(figure("tools", self.backend, what.clone(), "passages embedded", "count", embedded));
        figures.push(figure("tools", self.backend, what.clone(), "embedding calls", "count", calls));
        figures.push(figure("tools", self.backend, what, "request to indexed", "ms", times));
        Ok(figures)
    }

    /// Searches by meaning until no passage is without its vector.
    async fn all_embedded(&self, base: &str) -> BenchResult<()> {
        for _ in 0..6000 {
            let res = self.http.get(format!("{}{base}/search?query=indexed&mode=semantic&limit=1", self.base));
            let answer: serde_json::Value = res.bearer_auth(&self.key).send().await?.json().await?;
            if answer["not_embedded"] == 0 {
                return Ok(());
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        Err("the passages were not embedded within a minute".into())
    }

    /// The passages a search by meaning ranks (every one has a vector, so all are answered).
    async fn passages_searched(&self, base: &str) -> BenchResult<u64> {
        let mut cursor: Option<String> = None;
        let mut count = 0u64;
        loop {
            let mut url = format!("{}{base}/search?query=deploy&mode=semantic&limit=50", self.base);
            if let Some(c) = &cursor {
                url.push_str(&format!("&cursor={c}"));
            }
            let answer: serde_json::Value = self.http.get(url).bearer_auth(&self.key).send().await?.json().await?;
            count += answer["matches"].as_array().map_or(0, Vec::len) as u64;
            match answer["next_cursor"].as_str() {
                Some(c) => cursor = Some(c.to_owned()),
                None => return Ok(count),
            }
        }
    }

    /// One GET of `path`, in ms; anything but a 200 fails the bench.
    async fn timed_get(&self, path: &str) -> BenchResult<f64> {
        let started = Instant::now();
        let res = self.http.get(format!("{}{path}", self.base)).bearer_auth(&self.key).send().await?;
        let status = res.status();
        res.bytes().await?;
        if status != 200 {
            return Err(format!("{path} answered {status}").into());
        }
        Ok(started.elapsed().as_secs_f64() * 1000.0)
    }

    /// One MCP `tools/call` with `params`, in ms; a failed call fails the bench.
    async fn timed_tool_call(&self, id: usize, params: serde_json::Value) -> BenchResult<f64> {
        let mcp = format!("{}/v1/mcp?workspace={WORKSPACE}", self.base);
        let message = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params});
        let started = Instant::now();
        let res = self
            .http
            .post(&mcp)
            .bearer_auth(&self.key)
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2025-06-18")
            .json(&message)
            .send()
            .await?;
        let status = res.status();
        let body = res.text().await?;
        if status != 200 || body.contains("\"isError\":true") || body.contains("\"error\":") {
            return Err(format!("an MCP call failed ({status}): {}", body.chars().take(200).collect::<String>()).into());
        }
        Ok(started.elapsed().as_secs_f64() * 1000.0)
    }

    /// Edits on an idle lane, each from the request to its 200 (published).
    async fn edit_latency(&self, base: &str, requests: usize) -> BenchResult<Vec<Figure>> {
        let (mut p50s, mut p99s) = (Vec::new(), Vec::new());
        for run in 0..self.runs {
            let mut times = Vec::with_capacity(requests);
            for i in 0..requests {
                let body = json!({"operations": [
                    {"command": "create", "path": format!("notes/{run}-{i}.md"), "file_text": "a fact the agent learned\n"},
                ], "session_id": "bench-agent"});
                let started = Instant::now();
                let (status, answer) = self.post(&format!("{base}/edits"), &body).await?;
                if status != 200 {
                    return Err(format!("an edit answered {status}: {answer}").into());
                }
                times.push(started.elapsed().as_secs_f64() * 1000.0);
            }
            times.sort_by(f64::total_cmp);
            p50s.push(percentile(&times, 0.5));
            p99s.push(percentile(&times, 0.99));
        }
        Ok(vec![
            figure("tools", self.backend, "edit, idle lane".into(), "request to published p50", "ms", p50s),
            figure("tools", self.backend, "edit, idle lane".into(), "request to published p99", "ms", p99s),
        ])
    }
}

/// The tools workload's memory folder: `MEMORY.md` of about `memory_bytes`
/// and `summaries` rollout summaries of about 1 KiB, by path in the folder.
fn memory_folder(memory_bytes: usize, summaries: usize) -> Vec<(String, String)> {
    let mut memory = String::with_capacity(memory_bytes + 200);
    let mut task = 0;
    while memory.len() < memory_bytes {
        memory.push_str(&format!(
            "## Task {task}: deploy service-{task} with the pinned runner image\n- keywords: ci, runner, cache-{task}\n- learned: bump the cache key after a lockfile change; rerun flaky tests once\n\n"
        ));
        task += 1;
    }
    let mut files = vec![("MEMORY.md".to_owned(), memory)];
    let body =
        "The user asked for a deploy. The agent pinned the runner image, bumped the cache key and reran the tests; "
            .repeat(9);
    for i in 0..summaries {
        let text = format!(
            "thread_id: r{i:05}\nupdated_at: 2026-11-01T00:00:00+00:00\n\n# Summary {i}\n{body}\nticket TOOLS-{i}\n"
        );
        files.push((format!("rollout_summaries/r{i:05}_deploy.md"), text));
    }
    files
}
