//! What can be checked of the container files without a Docker engine.

fn repo_file(name: &str) -> String {
    std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(name)).unwrap()
}

#[test]
fn compose_file_is_valid_yaml_with_memoryd_postgres_and_named_volumes() {
    let compose: serde_yaml::Value = serde_yaml::from_str(&repo_file("docker-compose.yml")).unwrap();
    let services = compose["services"].as_mapping().unwrap();
    for name in ["memoryd", "postgres"] {
        let service = &compose["services"][name];
        assert!(services.contains_key(name), "{name}");
        assert!(service["healthcheck"]["test"].is_sequence(), "{name} has a health check");
    }
    let memoryd = &compose["services"]["memoryd"];
    let env = memoryd["environment"].as_mapping().unwrap();
    assert!(env.keys().any(|k| k.as_str() == Some("DATABASE_URL")));
    assert_eq!(memoryd["depends_on"]["postgres"]["condition"].as_str(), Some("service_healthy"));
    let volumes = compose["volumes"].as_mapping().unwrap();
    assert!(volumes.len() >= 2, "named volumes for the database and the workspaces");
    for service in ["memoryd", "postgres"] {
        let mounts = compose["services"][service]["volumes"].as_sequence().unwrap();
        let named = mounts.iter().filter_map(|m| m.as_str()).filter_map(|m| m.split(':').next());
        assert!(named.clone().count() > 0);
        for volume in named {
            assert!(volumes.keys().any(|k| k.as_str() == Some(volume)), "{volume} is declared");
        }
    }
}

#[test]
fn dockerfile_is_multi_stage_and_runs_as_non_root() {
    let dockerfile = repo_file("Dockerfile");
    let stages = dockerfile.lines().filter(|l| l.trim_start().to_uppercase().starts_with("FROM ")).count();
    assert!(stages >= 2, "multi-stage build");
    let user = dockerfile.lines().rev().find(|l| l.trim_start().to_uppercase().starts_with("USER ")).unwrap();
    assert!(!user.contains("root") && !user.trim().ends_with(" 0"), "{user}");
    // No frontend to fetch: the Dockerfile uses nothing the builtin one lacks.
    assert!(!dockerfile.contains("# syntax="), "no syntax directive");
}

/// The health checks ask where the server listens (`memoryd health` reads
/// MEMORYD_LISTEN), never a hard-coded address.
#[test]
fn health_checks_follow_the_listen_address() {
    let dockerfile = repo_file("Dockerfile");
    let check = dockerfile.lines().find(|l| l.starts_with("HEALTHCHECK")).unwrap();
    assert!(check.contains(r#"CMD ["memoryd", "health"]"#), "{check}");
    let compose: serde_yaml::Value = serde_yaml::from_str(&repo_file("docker-compose.yml")).unwrap();
    let test = compose["services"]["memoryd"]["healthcheck"]["test"].as_sequence().unwrap();
    let words: Vec<&str> = test.iter().filter_map(|w| w.as_str()).collect();
    assert_eq!(words, ["CMD", "memoryd", "health", "--ready"]);
    assert!(!dockerfile.contains("8080/") && !repo_file("docker-compose.yml").contains(":8080/"));
}

/// The build context is what the build copies, not `target/` or `.git`;
/// the dependencies are built in a layer before memoryd's source arrives.
#[test]
fn the_image_builds_from_a_small_context_with_a_dependency_layer() {
    let ignore = repo_file(".dockerignore");
    let lines: Vec<&str> = ignore.lines().filter(|l| !l.starts_with('#') && !l.trim().is_empty()).collect();
    assert_eq!(lines.first(), Some(&"*"), "everything is left out but what is named");
    let dockerfile = repo_file("Dockerfile");
    let build_stage = &dockerfile[..dockerfile.rfind("FROM ").unwrap()];
    for copy in build_stage.lines().filter(|l| l.starts_with("COPY ")) {
        let words: Vec<&str> = copy.split_whitespace().collect();
        for source in &words[1..words.len() - 1] {
            let source = source.trim_end_matches('/');
            assert!(
                lines.contains(&format!("!{source}").as_str()) || lines.contains(&format!("!{source}/").as_str()),
                "{source} is in the context"
            );
        }
    }
    let dependencies = build_stage.find("cargo build").unwrap();
    assert!(dependencies < build_stage.find("COPY src src").unwrap(), "dependencies first");
    assert!(build_stage.matches("cargo build --release --locked").count() == 2);
}

/// Compose: restarts, a database check over TCP, the port on the loopback
/// alone (it serves the admin API).
#[test]
fn compose_restarts_checks_postgres_over_tcp_and_keeps_the_port_local() {
    let compose: serde_yaml::Value = serde_yaml::from_str(&repo_file("docker-compose.yml")).unwrap();
    for service in ["memoryd", "postgres"] {
        assert_eq!(compose["services"][service]["restart"].as_str(), Some("unless-stopped"), "{service}");
    }
    let check = compose["services"]["postgres"]["healthcheck"]["test"][1].as_str().unwrap();
    assert!(check.contains("pg_isready -h 127.0.0.1"), "{check}");
    for port in compose["services"]["memoryd"]["ports"].as_sequence().unwrap() {
        assert!(port.as_str().unwrap().starts_with("127.0.0.1:"), "{port:?}");
    }
}

#[test]
fn ci_runs_the_test_command_that_the_readme_names() {
    let readme = repo_file("README.md");
    let ci = repo_file(".ci/run");
    assert!(readme.contains("scripts/test.sh"));
    assert!(ci.contains("scripts/test.sh"));
}

/// Every metric name in `src/metrics.rs` is listed in docs/operating.md.
#[test]
fn every_metric_served_is_documented() {
    let (source, operating) = (repo_file("src/metrics.rs"), repo_file("docs/operating.md"));
    let names: std::collections::BTreeSet<&str> = source
        .split('"')
        .skip(1)
        .step_by(2)
        .filter(|s| s.starts_with("memoryd_") && s.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'))
        .collect();
    assert!(names.len() > 20, "{names:?}");
    let missing: Vec<&&str> = names.iter().filter(|name| !operating.contains(&format!("`{name}`"))).collect();
    assert!(missing.is_empty(), "metrics not in docs/operating.md: {missing:?}");
}

/// The docs a user reads cite nothing outside the repository, and CI runs
/// the documented commands.
#[test]
fn the_docs_stay_inside_the_repository_and_are_run() {
    for doc in [
        "README.md",
        "docs/api.md",
        "docs/operating.md",
        "docs/architecture.md",
        "docs/contract.md",
        "docs/rules.md",
        "openapi.yaml",
    ] {
        let text = repo_file(doc);
        assert!(!text.contains("../shared") && !text.contains("SPEC §") && !text.contains("SPEC.md"), "{doc}");
    }
    assert!(repo_file(".ci/run").contains("scripts/doc-check.sh"));
}

#[test]
fn openapi_lists_exactly_the_routes_the_router_serves() {
    let spec: serde_yaml::Value = serde_yaml::from_str(&repo_file("openapi.yaml")).unwrap();
    let mut documented = Vec::new();
    for (path, item) in spec["paths"].as_mapping().unwrap() {
        for (method, _) in item.as_mapping().unwrap() {
            let method = method.as_str().unwrap();
            if method != "parameters" {
                documented.push((method.to_uppercase(), path.as_str().unwrap().to_owned()));
            }
        }
    }
    documented.sort();
    let mut served: Vec<(String, String)> =
        memoryd::api::route_list().into_iter().map(|(m, p, _)| (m.to_string(), p.replace("{*", "{"))).collect();
    served.sort();
    assert_eq!(documented, served);
}

/// Each tenant route's `x-permission` is the one the authorization layer
/// checks, and a route for the admin or for anyone has none.
#[test]
fn openapi_names_the_permission_each_route_takes() {
    let spec: serde_yaml::Value = serde_yaml::from_str(&repo_file("openapi.yaml")).unwrap();
    for (method, path, access) in memoryd::api::route_list() {
        let operation = &spec["paths"][path.replace("{*", "{").as_str()][method.as_str().to_lowercase().as_str()];
        let documented = operation["x-permission"].as_str();
        let checked = match access {
            memoryd::api::Access::Key(permission, _) => Some(permission.as_str()),
            _ => None,
        };
        assert_eq!(documented, checked, "{method} {path}");
        if checked.is_some() {
            assert!(operation["responses"]["403"].is_mapping(), "{method} {path} documents no 403");
        }
    }
}

/// Every file the binary embeds from outside `src/`, and every crate
/// `Cargo.toml` takes from a path, is copied into the image's build stage, or
/// `docker build` would fail.
#[test]
fn the_image_build_copies_every_embedded_file() {
    let dockerfile = repo_file("Dockerfile");
    let copied: Vec<&str> = dockerfile
        .lines()
        .filter_map(|l| l.strip_prefix("COPY "))
        .filter(|l| !l.starts_with("--from"))
        .flat_map(|l| l.split_whitespace().rev().skip(1))
        .collect();
    let mut embedded = Vec::new();
    let mut stack = vec![std::path::PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/src"))];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path).unwrap();
                for piece in text.split("include_str!(\"").skip(1) {
                    let target = dir.join(piece.split('"').next().unwrap());
                    embedded.push(std::fs::canonicalize(target).unwrap());
                }
                // `sqlx::migrate!` paths are relative to the crate's root.
                for piece in text.split("sqlx::migrate!(\"").skip(1) {
                    let target =
                        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(piece.split('"').next().unwrap());
                    embedded.push(std::fs::canonicalize(target).unwrap());
                }
            }
        }
    }
    let root = std::fs::canonicalize(env!("CARGO_MANIFEST_DIR")).unwrap();
    assert!(embedded.len() >= 8, "{embedded:?}");
    assert!(embedded.iter().any(|p| p.ends_with("migrations/postgres")), "{embedded:?}");
    let manifest = repo_file("Cargo.toml");
    for piece in manifest.split("path = \"").skip(1) {
        embedded.push(root.join(piece.split('"').next().unwrap()));
    }
    for file in embedded {
        let relative = file.strip_prefix(&root).unwrap();
        let top = relative.components().next().unwrap().as_os_str().to_str().unwrap();
        assert!(copied.contains(&top), "the Dockerfile does not copy {top} (for {})", relative.display());
    }
}

#[test]
fn the_operating_guide_documents_every_setting() {
    use clap::CommandFactory;
    let guide = repo_file("docs/operating.md");
    let missing: Vec<String> = memoryd::config::Config::command()
        .get_arguments()
        .filter_map(|a| a.get_env().map(|e| e.to_string_lossy().into_owned()))
        .filter(|env| !guide.contains(&format!("| `{env}` |")))
        .collect();
    assert!(missing.is_empty(), "settings missing from the configuration table of docs/operating.md: {missing:?}");
    let defaults = memoryd::config::Config::embedded("d".into(), None);
    let wrong: Vec<&str> = memoryd::config::whole_ranges(&defaults)
        .into_iter()
        .filter(|(name, ..)| name.starts_with("MEMORYD_"))
        .filter(|(name, _, min, max)| {
            !guide.lines().any(|l| l.starts_with(&format!("| `{name}` |")) && l.ends_with(&format!("| {min}–{max} |")))
        })
        .map(|(name, ..)| name)
        .collect();
    assert!(
        wrong.is_empty(),
        "settings whose valid range docs/operating.md does not give as the code checks it: {wrong:?}"
    );
}

#[tokio::test]
async fn memoryd_refuses_to_start_with_a_setting_out_of_range() {
    let dir = tempfile::tempdir().unwrap();
    for (setting, value) in [
        ("MEMORYD_JOB_LEASE_SECS", "0"),
        ("MEMORYD_BODY_TIMEOUT_SECS", "0"),
        ("MEMORYD_MAX_ATTEMPTS", "-1"),
        ("MEMORYD_RETAIN_RECORDS_DAYS", "-2"),
        ("MEMORYD_MAX_SEGMENT_BYTES", "0"),
    ] {
        let mut memoryd = crate::process::Memoryd::spawn(dir.path(), setting, &["serve"], &[(setting, value.into())]);
        let status = memoryd.exit().await;
        assert!(!status.success(), "{setting}={value} started");
        let log = memoryd.log_text();
        assert!(log.contains(setting), "{setting}={value}: the message names the setting: {log}");
    }
    let mut memoryd =
        crate::process::Memoryd::spawn(dir.path(), "negative", &["serve"], &[("MEMORYD_JOB_LEASE_SECS", "-5".into())]);
    assert!(!memoryd.exit().await.success());
    assert!(memoryd.log_text().contains("job-lease-secs"), "{}", memoryd.log_text());
}

/// The documents of a multi-document YAML file, by kind.
fn manifests(name: &str) -> Vec<serde_yaml::Value> {
    use serde::Deserialize;
    serde_yaml::Deserializer::from_str(&repo_file(name))
        .map(|doc| serde_yaml::Value::deserialize(doc).unwrap())
        .collect()
}

/// What every memoryd manifest says (scripts/test.sh checks them against
/// the API's schemas): several replicas, probes on memoryd's health routes at
/// the port it listens on, the image's user, a start that may wait for the
/// database, a grace past memoryd's own, the data dir mounted where it is
/// named. Its documents, by kind, and its container.
fn checked_manifest(name: &str) -> (Vec<serde_yaml::Value>, serde_yaml::Value) {
    let docs = manifests(name);
    let deployment = docs.iter().find(|d| d["kind"].as_str() == Some("Deployment")).expect("a Deployment").clone();
    assert!(deployment["spec"]["replicas"].as_u64().unwrap() >= 2, "{name}");
    let pod = &deployment["spec"]["template"]["spec"];
    assert_eq!(pod["securityContext"]["runAsUser"].as_u64(), Some(10001), "{name}: the image's user");
    assert!(pod["terminationGracePeriodSeconds"].as_u64().unwrap() > 30, "{name}: past memoryd's 30 s of shutdown");
    let container = pod["containers"][0].clone();
    assert_eq!(env_of(&container, "MEMORYD_LISTEN")["value"].as_str(), Some("0.0.0.0:8080"));
    assert_eq!(container["ports"][0]["containerPort"].as_u64(), Some(8080));
    let secret = |name: &str| env_of(&container, name)["valueFrom"]["secretKeyRef"].is_mapping();
    assert!(secret("DATABASE_URL") && secret("MEMORYD_ADMIN_TOKEN"), "{name}: secrets in a Secret");
    let wait: u64 = env_of(&container, "MEMORYD_DATABASE_WAIT_SECS")["value"].as_str().unwrap().parse().unwrap();
    let startup = &container["startupProbe"];
    let patience = startup["periodSeconds"].as_u64().unwrap() * startup["failureThreshold"].as_u64().unwrap();
    assert!(patience > wait, "{name}: the startup probe outlasts the wait for the database");
    for (probe, path) in [("startupProbe", "/healthz"), ("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")] {
        assert_eq!(container[probe]["httpGet"]["path"].as_str(), Some(path), "{name}: {probe}");
    }
    let mount = &container["volumeMounts"][0];
    assert_eq!(mount["mountPath"].as_str(), env_of(&container, "MEMORYD_DATA_DIR")["value"].as_str());
    let service = docs.iter().find(|d| d["kind"].as_str() == Some("Service")).expect("a Service");
    assert_eq!(service["spec"]["ports"][0]["targetPort"].as_str(), Some("http"));
    let data = pod["volumes"].as_sequence().unwrap().iter().find(|v| v["name"] == mount["name"]).unwrap().clone();
    (docs, data)
}

fn env_of(container: &serde_yaml::Value, name: &str) -> serde_yaml::Value {
    let env = container["env"].as_sequence().unwrap();
    env.iter().find(|e| e["name"].as_str() == Some(name)).cloned().unwrap_or_else(|| panic!("no {name}"))
}

/// On a shared volume: one `ReadWriteMany` claim, the data dir of every replica.
#[test]
fn the_kubernetes_manifests_run_several_replicas_as_memoryd_expects() {
    let (docs, data) = checked_manifest("deploy/kubernetes/memoryd.yaml");
    let claim = docs.iter().find(|d| d["kind"].as_str() == Some("PersistentVolumeClaim")).expect("a claim");
    assert_eq!(claim["spec"]["accessModes"][0].as_str(), Some("ReadWriteMany"), "replicas share the workspaces");
    assert_eq!(data["persistentVolumeClaim"]["claimName"], claim["metadata"]["name"]);
    let postgres = manifests("deploy/kubernetes/postgres.yaml");
    let check = &postgres[0]["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["exec"]["command"];
    assert!(check.as_sequence().unwrap().iter().any(|w| w.as_str() == Some("127.0.0.1")), "pg_isready over TCP");
}

/// In a bucket: stateless replicas (no claim; each data dir an `emptyDir`
/// larger than the copies it may keep), the bucket and its credentials from
/// a Secret by the `AWS_*` names memoryd reads.
#[test]
fn the_bucket_manifest_runs_stateless_replicas() {
    let (docs, data) = checked_manifest("deploy/kubernetes/memoryd-bucket.yaml");
    assert!(docs.iter().all(|d| d["kind"].as_str() != Some("PersistentVolumeClaim")), "no shared volume");
    let size = data["emptyDir"]["sizeLimit"].as_str().expect("a bounded emptyDir");
    let gib: u64 = size.strip_suffix("Gi").expect("in Gi").parse().unwrap();
    let deployment = docs.iter().find(|d| d["kind"].as_str() == Some("Deployment")).unwrap();
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    let cache: u64 = env_of(container, "MEMORYD_CACHE_BYTES")["value"].as_str().unwrap().parse().unwrap();
    assert!(cache < gib << 30, "the copies fit the data dir with room for uploads and exports");
    for name in ["MEMORYD_STORAGE", "AWS_REGION", "AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"] {
        let secret = &env_of(container, name)["valueFrom"]["secretKeyRef"];
        assert_eq!(secret["name"].as_str(), Some("memoryd-bucket"), "{name}");
    }
    let ephemeral = container["resources"]["limits"]["ephemeral-storage"].as_str().unwrap();
    assert!(ephemeral.strip_suffix("Gi").unwrap().parse::<u64>().unwrap() > gib, "the pod may use its data dir");
}
