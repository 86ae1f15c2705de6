//! The stylesheet and the script, compiled into the binary.

use axum::extract::Path;
use axum::http::StatusCode;
use axum::http::header::{CACHE_CONTROL, CONTENT_TYPE};
use axum::response::{IntoResponse, Response};

const CSS: &str = include_str!("../assets/dashboard.css");
const JS: &str = include_str!("../assets/dashboard.js");

/// `GET /assets/{file}`.
pub(crate) async fn serve(Path(file): Path<String>) -> Response {
    let (body, kind) = match file.as_str() {
        "dashboard.css" => (CSS, "text/css; charset=utf-8"),
        "dashboard.js" => (JS, "text/javascript; charset=utf-8"),
        _ => return (StatusCode::NOT_FOUND, "no such asset\n").into_response(),
    };
    // Short: an upgraded binary's assets show after a minute at most.
    ([(CONTENT_TYPE, kind), (CACHE_CONTROL, "max-age=60")], body).into_response()
}
