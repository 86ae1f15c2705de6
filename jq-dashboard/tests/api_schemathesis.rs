//! A property-based run of the API's OpenAPI document against a live
//! server (SQLite): schemathesis, from PyPI, generates requests from the
//! document (valid and invalid), and checks that no answer is a server
//! error, that every status, content type, header and body is one the
//! document declares, and that requests the document calls invalid are
//! refused. scripts/install-schemathesis.sh installs it (a virtualenv
//! under ~/.cache/jq) when missing; scripts/start-services.sh runs it.

#![cfg(feature = "sqlite")]
#![allow(clippy::unwrap_used)] // tests may unwrap

use std::path::Path;
use std::time::Duration;

use jq_dashboard::Options;
use jq_dashboard::api::ApiOptions;

/// Examples per operation and phase: enough to find a missing status or a
/// body off its schema, small enough for a test run (about 10 s).
const MAX_EXAMPLES: &str = "25";

/// The checks: no server error, and nothing off the document.
const CHECKS: &str = "not_a_server_error,status_code_conformance,content_type_conformance,\
                      response_schema_conformance,response_headers_conformance,negative_data_rejection";

#[tokio::test]
async fn schemathesis_finds_no_server_error_and_no_schema_violation() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let install = tokio::process::Command::new("bash")
        .arg(root.join("scripts/install-schemathesis.sh"))
        .output()
        .await
        .expect("bash runs scripts/install-schemathesis.sh");
    assert!(
        install.status.success(),
        "installing schemathesis failed (python3 with venv and PyPI needed):\n{}",
        String::from_utf8_lossy(&install.stderr)
    );
    let st = String::from_utf8(install.stdout).unwrap().trim().to_owned();

    let dir = tempfile::tempdir().unwrap();
    let client = jq::connect(&format!("sqlite://{}", dir.path().join("jobs.db").display())).await.unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    // Short waits: a generated wait on a live job must not hold the run.
    let options = ApiOptions::new(Options::new()).max_wait(Duration::from_millis(500));
    let server = tokio::spawn(axum::serve(listener, jq_dashboard::api::router(client, options)).into_future());

    let output = tokio::process::Command::new(&st)
        .args(["run", &format!("http://{address}/api/v1/openapi.json")])
        .args(["--checks", CHECKS, "--max-examples", MAX_EXAMPLES, "--workers", "1"])
        .args(["--request-timeout", "10", "--no-color", "--report-dir"])
        .arg(dir.path().join("reports"))
        .current_dir(dir.path())
        .kill_on_drop(true)
        .output()
        .await
        .unwrap();
    server.abort();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "schemathesis found failures:\n{stdout}\n{stderr}");
    // Every operation but the document's own, which schemathesis leaves out.
    let document: serde_json::Value = serde_json::from_str(&jq_dashboard::api::openapi_json()).unwrap();
    let operations: usize = document["paths"].as_object().unwrap().values().map(|p| p.as_object().unwrap().len()).sum();
    assert!(stdout.contains(&format!("Tested: {}", operations - 1)), "every operation was tested:\n{stdout}");
    assert!(!stdout.contains("Network Error"), "{stdout}");
}
