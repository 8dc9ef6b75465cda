//! The portability workload: a workspace of many conversations exported
//! (streamed to a file) and imported into an empty workspace, each timed,
//! with the peak RSS of the process (server and client) over both.

use super::{Bench, BenchResult, Figure, figure, peak_rss_mib, reset_peak_rss};
use serde_json::{Value, json};
use std::time::Instant;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Clients seeding the workspace at once.
const SEEDERS: usize = 16;

impl Bench {
    /// `rollouts` conversations of `segments` segments of about 10 KB of
    /// text that compresses about 2× (hex), exported and imported `runs` times.
    pub(super) async fn portability(&self, rollouts: usize, segments: usize) -> BenchResult<Vec<Figure>> {
        let workspace = format!("port-{rollouts}");
        let mut seeders = tokio::task::JoinSet::new();
        for seeder in 0..SEEDERS {
            let (http, base, key, workspace) =
                (self.http.clone(), self.base.clone(), self.key.clone(), workspace.clone());
            seeders.spawn(async move {
                for r in (seeder..rollouts).step_by(SEEDERS) {
                    let url = format!("{base}/v1/sessions/port-{r}/layouts/default/segments?workspace={workspace}");
                    for s in 0..segments {
                        let text: String = (0..320).map(|_| uuid::Uuid::new_v4().simple().to_string()).collect();
                        let body = json!({"rollout_id": format!("p{r:05}"), "input": format!("{s}: {text}")});
                        let res =
                            http.post(&url).bearer_auth(&key).json(&body).send().await.map_err(|e| e.to_string())?;
                        if res.status() != 201 {
                            let status = res.status();
                            return Err(format!(
                                "portability seeding answered {status}: {}",
                                res.text().await.unwrap_or_default()
                            ));
                        }
                    }
                }
                Ok(())
            });
        }
        while let Some(done) = seeders.join_next().await {
            done??;
        }
        let scratch = tempfile::tempdir()?;
        let (mut exports, mut imports, mut peaks, mut sizes) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for run in 0..self.runs {
            reset_peak_rss();
            let archive = scratch.path().join(format!("{run}.tar.gz"));
            let started = Instant::now();
            let mut res = self
                .http
                .get(format!("{}/v1/workspaces/{workspace}/export", self.base))
                .bearer_auth(&self.key)
                .send()
                .await?;
            if res.status() != 200 {
                return Err(format!("the export answered {}", res.status()).into());
            }
            let mut file = tokio::fs::File::create(&archive).await?;
            while let Some(chunk) = res.chunk().await? {
                file.write_all(&chunk).await?;
            }
            file.sync_all().await?;
            exports.push(started.elapsed().as_secs_f64());
            let size = tokio::fs::metadata(&archive).await?.len();
            sizes.push(size as f64 / (1 << 20) as f64);

            let started = Instant::now();
            let job = self.upload(&format!("/v1/workspaces/imported-{run}/import"), &archive, size).await?;
            let state = self.wait_for_job(job["job_id"].as_str().ok_or("no job id")?).await?;
            if state != "succeeded" {
                return Err(format!("the import ended {state}").into());
            }
            imports.push(started.elapsed().as_secs_f64());
            peaks.push(peak_rss_mib());
        }
        let case = format!("{rollouts} rollouts");
        Ok(vec![
            figure("portability", self.backend, case.clone(), "archive size", "MiB", sizes),
            figure("portability", self.backend, case.clone(), "export (streamed to a file)", "s", exports),
            figure("portability", self.backend, case.clone(), "import (upload to job succeeded)", "s", imports),
            figure("portability", self.backend, case, "peak RSS (server and client)", "MiB", peaks),
        ])
    }

    /// POSTs a file as the body, streamed from disk (the client holds none
    /// of it in memory, so the peak RSS is the server's); the JSON answer.
    async fn upload(&self, path: &str, file: &std::path::Path, size: u64) -> BenchResult<Value> {
        let address = self.base.trim_start_matches("http://").to_owned();
        let mut stream = tokio::net::TcpStream::connect(&address).await?;
        let head = format!(
            "POST {path} HTTP/1.1\r\nHost: {address}\r\nAuthorization: Bearer {}\r\nContent-Type: application/gzip\r\nContent-Length: {size}\r\nConnection: close\r\n\r\n",
            self.key
        );
        stream.write_all(head.as_bytes()).await?;
        tokio::io::copy(&mut tokio::fs::File::open(file).await?, &mut stream).await?;
        let mut answer = Vec::new();
        stream.read_to_end(&mut answer).await?;
        let text = String::from_utf8_lossy(&answer);
        let (status, body) = text.split_once("\r\n\r\n").ok_or("no answer to the upload")?;
        if !status.starts_with("HTTP/1.1 202") {
            return Err(format!("the import answered {status}: {body}").into());
        }
        Ok(serde_json::from_str(body)?)
    }
}
