//! A stand-in for a cluster without cheiron's CRDs, shared by the CLI tests (`tests/cli.rs`,
//! `tests/explain_cli.rs`): a loopback server answering every request with kube-apiserver's
//! plain-text 404 for an API group it does not serve, and a kubeconfig pointing at it.

use std::{
    io::{BufRead, BufReader, Write},
    path::{Path, PathBuf},
};

/// Serves `requests` requests with a plain-text 404 on a loopback port, then stops; returns a
/// kubeconfig for it, written in `dir`.
pub fn kubeconfig(dir: &Path, requests: usize) -> std::io::Result<PathBuf> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    let port = listener.local_addr()?.port();
    std::thread::spawn(move || {
        for stream in listener.incoming().take(requests).flatten() {
            let mut reader = BufReader::new(&stream);
            let mut line = String::new();
            // Read the request head; the probe is a GET without a body.
            while reader.read_line(&mut line).is_ok_and(|n| n > 2) {
                line.clear();
            }
            let body = "404 page not found\n";
            let _ = (&stream).write_all(
                format!(
                    "HTTP/1.1 404 Not Found\r\nContent-Type: text/plain; charset=utf-8\r\n\
                     Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                )
                .as_bytes(),
            );
        }
    });
    let kubeconfig = dir.join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: c\n\
             clusters: [{{name: c, cluster: {{server: \"http://127.0.0.1:{port}\"}}}}]\n\
             users: [{{name: u, user: {{}}}}]\n\
             contexts: [{{name: c, context: {{cluster: c, user: u}}}}]\n"
        ),
    )?;
    Ok(kubeconfig)
}
