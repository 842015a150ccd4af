//! A fake kubelet credential-provider plugin for cheiron's tests
//! (docs/credential-providers.md): it speaks `credentialprovider.kubelet.k8s.io` on
//! stdin/stdout and issues numbered credentials, `user-N`/`pass-N` for its Nth call.
//!
//! `cheiron-fake-credential-provider --state DIR [--cache-duration 6s] [--pattern P]...`
//!
//! In DIR it counts its calls (`calls`), appends `N UNIX_MILLIS` for each call, the time it
//! started, to `calls.log` (the cluster benchmark times rotations from it), keeps the last
//! request (`request.json`) and the names of the environment variables it got (`env`), and
//! reads `mode` before each answer: `ok` (default), `fail` (exit 1 with a message on stderr
//! holding the canary `STDERR-CANARY`, which must reach the controller's log and nothing else),
//! `hang` (sleep for an hour), `garbage` (print something that is not JSON, holding a canary),
//! `flood` (print 4 MiB).

use std::{
    fs,
    io::{Read, Write},
    path::PathBuf,
    time::{Duration, SystemTime, UNIX_EPOCH},
};

fn main() {
    if let Err(e) = run() {
        eprintln!("fake credential provider: {e}");
        std::process::exit(2);
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let started = SystemTime::now().duration_since(UNIX_EPOCH)?.as_millis();
    let mut state: Option<PathBuf> = None;
    let mut cache_duration = "6s".to_owned();
    let mut patterns: Vec<String> = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--state" => state = args.next().map(PathBuf::from),
            "--cache-duration" => {
                cache_duration = args.next().ok_or("--cache-duration needs a value")?
            }
            "--pattern" => patterns.push(args.next().ok_or("--pattern needs a value")?),
            other => return Err(format!("unknown argument {other}").into()),
        }
    }
    let state = state.ok_or("--state DIR is required")?;
    fs::create_dir_all(&state)?;
    let mut request = String::new();
    std::io::stdin().read_to_string(&mut request)?;
    fs::write(state.join("request.json"), &request)?;
    let names: Vec<String> = std::env::vars_os()
        .map(|(k, _)| k.to_string_lossy().into_owned())
        .collect();
    fs::write(state.join("env"), names.join("\n"))?;
    let calls_file = state.join("calls");
    let calls: u64 = fs::read_to_string(&calls_file)
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0)
        + 1;
    fs::write(&calls_file, calls.to_string())?;
    fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(state.join("calls.log"))?
        .write_all(format!("{calls} {started}\n").as_bytes())?;
    let mode = fs::read_to_string(state.join("mode")).unwrap_or_default();
    let request: serde_json::Value = serde_json::from_str(&request)?;
    let api_version = request["apiVersion"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    if patterns.is_empty() {
        let image = request["image"].as_str().unwrap_or_default();
        patterns.push(image.split('/').next().unwrap_or_default().to_owned());
    }
    let mut out = std::io::stdout().lock();
    match mode.trim() {
        "fail" => {
            eprintln!("fake credential provider: told to fail (call {calls}) STDERR-CANARY");
            std::process::exit(1);
        }
        "hang" => {
            std::thread::sleep(Duration::from_secs(3600));
        }
        "garbage" => {
            writeln!(out, "this is not a response GARBAGE-CANARY-{calls}")?;
        }
        "flood" => {
            let line = "x".repeat(1023);
            for _ in 0..4096 {
                writeln!(out, "{line}")?;
            }
        }
        _ => {
            let auth: serde_json::Map<String, serde_json::Value> = patterns
                .iter()
                .map(|p| {
                    (
                        p.clone(),
                        serde_json::json!({"username": format!("user-{calls}"), "password": format!("pass-{calls}")}),
                    )
                })
                .collect();
            let response = serde_json::json!({
                "apiVersion": api_version,
                "kind": "CredentialProviderResponse",
                "cacheKeyType": "Registry",
                "cacheDuration": cache_duration,
                "auth": auth,
            });
            writeln!(out, "{response}")?;
        }
    }
    Ok(())
}
