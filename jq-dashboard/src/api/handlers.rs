//! The endpoints: each reads its input, calls the [`jq::Client`], and
//! answers JSON.

use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, RawQuery, State};
use axum::http::StatusCode;
use jq::storage::{Storage, StorageExt};
use jq::{CancelAnswer, JobId};
use serde::Deserialize;
use serde_json::value::RawValue;

use super::body::JsonBody;
use super::error::{ApiError, ApiResult, ErrorBody};
use super::idempotency::{self, IdempotencyHeader, Route};
use super::model::{
    EnqueueBatchRequest, EnqueueBatchResponse, EnqueueRequest, EnqueueResponse, JobView, SignalRequest, StateName,
    StatsResponse, WaitResponse,
};
use super::{ApiOptions, openapi};

/// What every handler shares.
pub(crate) struct Api<S> {
    pub(crate) client: jq::Client<S>,
    pub(crate) options: ApiOptions,
}

type Shared<S> = State<Arc<Api<S>>>;

/// The longest `timeout_ms` accepted: an hour.
const MAX_TIMEOUT_MS: u64 = 3_600_000;

/// How often a wait reads the job again.
const WAIT_POLL: Duration = Duration::from_millis(50);

/// Enqueue one job.
#[utoipa::path(
    post, path = "/api/v1/jobs", tag = "jobs",
    params(("Idempotency-Key" = Option<String>, Header, description = "Makes the enqueue exactly-once (draft-ietf-httpapi-idempotency-key-header-09): a quoted string of 1 to 255 printable ASCII characters, e.g. \"8e03978e-40d5-43e8-bc93-6894a57f9324\". A repeat with the same key and the same body stores nothing and gets the first answer (the same ids, 200); the same key with another body is refused with 422 (`idempotency_key_reused`, the jobs already stored in `job_ids`). The key is kept as long as the first job it made is stored: until retention purges it (by default a day after it completed or was cancelled, seven days after it went dead). Each job's id is derived from the key, so the body may not give `id` or `unique_key` with it. A request refused with a 4xx stores nothing and leaves the key unused. Compared: queue, kind, payload (its text), priority, max_attempts, key; not run_at or delay_ms.", pattern = r#"^"(?:[ !#-\[\]-~]|\\["\\]){1,255}"$"#)),
    request_body = EnqueueRequest,
    responses(
        (status = 200, description = "Stored, or already stored: a resent id, a repeat with the same Idempotency-Key and body, or a unique key a live job holds", body = EnqueueResponse),
        (status = 400, description = "A field or the Idempotency-Key header is invalid; nothing stored", body = ErrorBody),
        (status = 401, description = "A token is required", body = ErrorBody),
        (status = 403, description = "Read-only token or API, or a page of another site", body = ErrorBody),
        (status = 413, description = "The body or the payload is too large; nothing stored", body = ErrorBody),
        (status = 415, description = "The body is not application/json", body = ErrorBody),
        (status = 422, description = "The Idempotency-Key was used with another body; nothing stored", body = ErrorBody),
    ),
    security((), ("token" = [])),
)]
pub(crate) async fn enqueue<S: Storage>(
    State(api): Shared<S>,
    IdempotencyHeader(key): IdempotencyHeader,
    JsonBody(request): JsonBody<EnqueueRequest>,
) -> ApiResult<Json<EnqueueResponse>> {
    let Some(key) = key else {
        let job = request.into_job(api.client.clock().now(), "")?;
        let id = api.client.enqueue(job).await.map_err(|e| ApiError::from_core(e, ""))?;
        return Ok(Json(EnqueueResponse { id: id.0 }));
    };
    let job = keyed_job(request, api.client.clock().now(), "", &key, Route::One, 0)?;
    let ids = idempotency::enqueue(&api.client, &key, Route::One, vec![job]).await?;
    let id = ids.first().ok_or_else(|| {
        ApiError::from_core(jq::Error::Corrupt { id: None, reason: "an enqueue of one job answered no id".into() }, "")
    })?;
    Ok(Json(EnqueueResponse { id: id.0 }))
}

/// `request` as the job at `index` of a request with `key` on `route`:
/// its id derived from the key. A body naming its own `id` or a
/// `unique_key` is refused (400). *Both would make the answer another
/// job's than the key's: an id already chooses the job, and a unique key
/// held by a live job answers that job's id while storing nothing, which
/// nothing could remember for the repeat.*
fn keyed_job(
    request: EnqueueRequest,
    now: chrono::DateTime<chrono::Utc>,
    prefix: &str,
    key: &idempotency::IdempotencyKey,
    route: Route,
    index: usize,
) -> ApiResult<jq::NewJob> {
    if request.id.is_some() {
        return Err(ApiError::invalid(
            format!("{prefix}id"),
            "give an id or an Idempotency-Key, not both: with the key, each job's id is derived from it",
        ));
    }
    if request.unique_key.is_some() {
        return Err(ApiError::invalid(
            format!("{prefix}unique_key"),
            "give a unique_key or an Idempotency-Key, not both: the key already makes the enqueue exactly-once",
        ));
    }
    let mut job = request.into_job(now, prefix)?;
    job.id = key.job_id(route, index);
    Ok(job)
}

/// Enqueue a batch of jobs: every one or none.
#[utoipa::path(
    post, path = "/api/v1/jobs/batch", tag = "jobs",
    params(("Idempotency-Key" = Option<String>, Header, description = "Makes the enqueue exactly-once (draft-ietf-httpapi-idempotency-key-header-09): a quoted string of 1 to 255 printable ASCII characters, e.g. \"8e03978e-40d5-43e8-bc93-6894a57f9324\". A repeat with the same key and the same body stores nothing and gets the first answer (the same ids, 200); the same key with another body is refused with 422 (`idempotency_key_reused`, the jobs already stored in `job_ids`). The key is kept as long as the first job it made is stored: until retention purges it (by default a day after it completed or was cancelled, seven days after it went dead). Each job's id is derived from the key, so the body may not give `id` or `unique_key` with it. A request refused with a 4xx stores nothing and leaves the key unused. Compared: queue, kind, payload (its text), priority, max_attempts, key; not run_at or delay_ms.", pattern = r#"^"(?:[ !#-\[\]-~]|\\["\\]){1,255}"$"#)),
    request_body = EnqueueBatchRequest,
    responses(
        (status = 200, description = "Every job stored (or already stored: a resent id, a repeat with the same Idempotency-Key and body), ids in the order sent", body = EnqueueBatchResponse),
        (status = 400, description = "A field or the Idempotency-Key header is invalid, or too many jobs; nothing stored", body = ErrorBody),
        (status = 401, description = "A token is required", body = ErrorBody),
        (status = 403, description = "Read-only token or API, or a page of another site", body = ErrorBody),
        (status = 413, description = "The body or a payload is too large; nothing stored", body = ErrorBody),
        (status = 415, description = "The body is not application/json", body = ErrorBody),
        (status = 422, description = "The Idempotency-Key was used with another body; nothing stored", body = ErrorBody),
    ),
    security((), ("token" = [])),
)]
pub(crate) async fn enqueue_batch<S: Storage>(
    State(api): Shared<S>,
    IdempotencyHeader(key): IdempotencyHeader,
    JsonBody(request): JsonBody<EnqueueBatchRequest>,
) -> ApiResult<Json<EnqueueBatchResponse>> {
    let limit = api.options.max_batch;
    if request.jobs.len() > limit {
        return Err(ApiError::invalid(
            "jobs",
            format!("{} jobs: at most {limit} in one batch; send several", request.jobs.len()),
        ));
    }
    let now = api.client.clock().now();
    let ids = match key {
        None => {
            let jobs = request
                .jobs
                .into_iter()
                .enumerate()
                .map(|(i, job)| job.0.into_job(now, &format!("jobs[{i}].")))
                .collect::<ApiResult<Vec<_>>>()?;
            store(&api.client, jobs, true).await?
        }
        Some(key) => {
            let jobs = request
                .jobs
                .into_iter()
                .enumerate()
                .map(|(i, job)| keyed_job(job.0, now, &format!("jobs[{i}]."), &key, Route::Batch, i))
                .collect::<ApiResult<Vec<_>>>()?;
            idempotency::enqueue(&api.client, &key, Route::Batch, jobs).await?
        }
    };
    Ok(Json(EnqueueBatchResponse { ids: ids.into_iter().map(|id| id.0).collect() }))
}

/// Stores `jobs` in one step; a refusal names the job at fault as
/// `jobs[i].` when `batch`.
pub(crate) async fn store<S: Storage>(
    client: &jq::Client<S>,
    jobs: Vec<jq::NewJob>,
    batch: bool,
) -> ApiResult<Vec<JobId>> {
    // Which job a size refusal is about: the store names the size only.
    let sizes: Vec<usize> = jobs.iter().map(|j| j.payload.len()).collect();
    client.enqueue_many(jobs).await.map_err(|e| {
        let prefix = match &e {
            jq::Error::PayloadTooLarge { size, .. } if batch => {
                sizes.iter().position(|s| s == size).map(|i| format!("jobs[{i}].")).unwrap_or_default()
            }
            _ => String::new(),
        };
        ApiError::from_core(e, &prefix)
    })
}

/// Read one job.
#[utoipa::path(
    get, path = "/api/v1/jobs/{id}", tag = "jobs",
    params(("id" = uuid::Uuid, Path, description = "The job's id (a UUID)")),
    responses(
        (status = 200, description = "The job", body = JobView),
        (status = 400, description = "The id is not a UUID", body = ErrorBody),
        (status = 401, description = "A token is required", body = ErrorBody),
        (status = 404, description = "No job has this id", body = ErrorBody),
    ),
    security((), ("token" = []), ("read_token" = [])),
)]
pub(crate) async fn get_job<S: Storage>(
    State(api): Shared<S>,
    id: Result<Path<String>, PathRejection>,
) -> ApiResult<Json<JobView>> {
    let id = job_id(id)?;
    Ok(Json(with_result(&api, view(api.client.get(id).await)?).await?))
}

/// The query of a wait.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct WaitQuery {
    /// How long to wait at most, in milliseconds, up to an hour (the
    /// server cuts it to its longest wait, 30 s unless configured
    /// otherwise, which is also the default).
    #[param(minimum = 0, maximum = 3600000)]
    timeout_ms: Option<u64>,
}

/// Wait until a job is finished (completed, dead or cancelled), or the timeout.
#[utoipa::path(
    get, path = "/api/v1/jobs/{id}/wait", tag = "jobs",
    params(("id" = uuid::Uuid, Path, description = "The job's id (a UUID)"), WaitQuery),
    responses(
        (status = 200, description = "The job, finished or as it was at the timeout", body = WaitResponse),
        (status = 400, description = "The id or the timeout is invalid", body = ErrorBody),
        (status = 401, description = "A token is required", body = ErrorBody),
        (status = 404, description = "No job has this id", body = ErrorBody),
    ),
    security((), ("token" = []), ("read_token" = [])),
)]
pub(crate) async fn wait<S: Storage>(
    State(api): Shared<S>,
    id: Result<Path<String>, PathRejection>,
    RawQuery(query): RawQuery,
) -> ApiResult<Json<WaitResponse>> {
    let id = job_id(id)?;
    let query: WaitQuery = serde_urlencoded_query(query.as_deref().unwrap_or(""))?;
    let ceiling = api.options.max_wait;
    let timeout = query.timeout_ms.map_or(ceiling, |ms| Duration::from_millis(ms).min(ceiling));
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let job = api.client.get(id).await.map_err(|e| ApiError::from_core(e, ""))?;
        let finished = job.state.is_terminal();
        let now = tokio::time::Instant::now();
        if finished || now >= deadline {
            return Ok(Json(WaitResponse { finished, job: with_result(&api, view(Ok(job))?).await? }));
        }
        tokio::time::sleep(WAIT_POLL.min(deadline - now)).await;
    }
}

/// Cancel a job: one that has not started is Cancelled at once (200); a
/// running one gets a cancel request (202), and the pool running it stops
/// it and ends it Cancelled (or Completed, when its handler succeeded
/// first); a finished one is left as it is (409).
#[utoipa::path(
    post, path = "/api/v1/jobs/{id}/cancel", tag = "jobs",
    params(("id" = uuid::Uuid, Path, description = "The job's id (a UUID)")),
    responses(
        (status = 200, description = "Cancelled: the job as it is now", body = JobView),
        (status = 202, description = "Running: the cancel request is stored; the job as it is now", body = JobView),
        (status = 400, description = "The id is not a UUID", body = ErrorBody),
        (status = 401, description = "A token is required", body = ErrorBody),
        (status = 403, description = "Read-only token or API, or a page of another site", body = ErrorBody),
        (status = 404, description = "No job has this id", body = ErrorBody),
        (status = 409, description = "The job had already finished: nothing changed", body = ErrorBody),
    ),
    security((), ("token" = [])),
)]
pub(crate) async fn cancel<S: Storage>(
    State(api): Shared<S>,
    id: Result<Path<String>, PathRejection>,
) -> ApiResult<(StatusCode, Json<JobView>)> {
    let id = job_id(id)?;
    let status = match api.client.cancel(id).await.map_err(|e| ApiError::from_core(e, ""))? {
        CancelAnswer::Cancelled => StatusCode::OK,
        CancelAnswer::Requested => StatusCode::ACCEPTED,
        CancelAnswer::Finished(state) => return Err(ApiError::finished(state)),
    };
    Ok((status, Json(view(api.client.get(id).await)?)))
}

/// Send a signal to a durable job: stored until the job's wait of that
/// name takes it (each signal once, oldest first); a job waiting for it
/// runs again at once. A finished job refuses it (409).
#[utoipa::path(
    post, path = "/api/v1/jobs/{id}/signal", tag = "jobs",
    params(("id" = uuid::Uuid, Path, description = "The job's id (a UUID)")),
    request_body = SignalRequest,
    responses(
        (status = 202, description = "Stored: the job as it is now", body = JobView),
        (status = 400, description = "The id, the name or the payload is invalid; nothing stored", body = ErrorBody),
        (status = 401, description = "A token is required", body = ErrorBody),
        (status = 403, description = "Read-only token or API, or a page of another site", body = ErrorBody),
        (status = 404, description = "No job has this id", body = ErrorBody),
        (status = 409, description = "The job had already finished: nothing stored", body = ErrorBody),
        (status = 413, description = "The payload is over the step result limit; nothing stored", body = ErrorBody),
        (status = 415, description = "The body is not application/json", body = ErrorBody),
        (status = 429, description = "The job holds the most signals not taken yet (1,000): nothing stored; \
            send it again once the job's waits have taken some", body = ErrorBody),
    ),
    security((), ("token" = [])),
)]
pub(crate) async fn signal<S: Storage>(
    State(api): Shared<S>,
    id: Result<Path<String>, PathRejection>,
    JsonBody(request): JsonBody<SignalRequest>,
) -> ApiResult<(StatusCode, Json<JobView>)> {
    let id = job_id(id)?;
    let payload = match &request.payload {
        Some(raw) => jq::Payload::from_json(raw.get()),
        None => jq::Payload::from_json("null"),
    }
    .map_err(|e| ApiError::from_core(e, ""))?;
    let durable = api.client.storage().require_durable().map_err(|e| ApiError::from_core(e, ""))?;
    durable.signal(id, &request.name, &payload).await.map_err(|e| ApiError::from_core(e, ""))?;
    Ok((StatusCode::ACCEPTED, Json(view(api.client.get(id).await)?)))
}

/// Job counts per queue and state.
#[utoipa::path(
    get, path = "/api/v1/stats", tag = "queues",
    responses(
        (status = 200, description = "Counts per queue and state", body = StatsResponse),
        (status = 401, description = "A token is required", body = ErrorBody),
    ),
    security((), ("token" = []), ("read_token" = [])),
)]
pub(crate) async fn stats<S: Storage>(State(api): Shared<S>) -> ApiResult<Json<StatsResponse>> {
    let stats = api.client.stats().await.map_err(|e| ApiError::from_core(e, ""))?;
    Ok(Json(stats.into()))
}

/// This API's OpenAPI 3 document.
#[utoipa::path(
    get, path = "/api/v1/openapi.json", tag = "meta",
    responses(
        (status = 200, description = "The OpenAPI document", content_type = "application/json", body = Object),
        (status = 401, description = "A token is required", body = ErrorBody),
    ),
    security((), ("token" = []), ("read_token" = [])),
)]
pub(crate) async fn document() -> Json<utoipa::openapi::OpenApi> {
    Json(openapi())
}

/// 404 in JSON for a path the API does not have.
pub(crate) async fn no_route() -> ApiError {
    ApiError::no_route()
}

/// 405 in JSON for a method a path does not take.
pub(crate) async fn wrong_method() -> ApiError {
    ApiError::wrong_method()
}

/// The job id of the path, or 400 naming `id`.
fn job_id(path: Result<Path<String>, PathRejection>) -> ApiResult<JobId> {
    let Path(text) = path.map_err(|e| ApiError::invalid("id", format!("the job id could not be read: {e}")))?;
    text.parse::<JobId>().map_err(|e| ApiError::invalid("id", e.to_string()))
}

/// A job read from the store, as the API shows it.
fn view(job: jq::Result<jq::Job>) -> ApiResult<JobView> {
    job.and_then(JobView::try_from).map_err(|e| ApiError::from_core(e, ""))
}

/// `view` with the job's result, when it is Completed on a backend that
/// keeps results (one more read, only then).
async fn with_result<S: Storage>(api: &Api<S>, mut view: JobView) -> ApiResult<JobView> {
    if view.state == StateName(jq::State::Completed) && api.client.storage().capabilities().workflows.is_some() {
        let result = api.client.result(JobId(view.id)).await.map_err(|e| ApiError::from_core(e, ""))?;
        view.result = match result {
            Some(payload) => Some(RawValue::from_string(payload.as_str().to_owned()).map_err(|e| {
                ApiError::from_core(
                    jq::Error::Corrupt { id: Some(JobId(view.id)), reason: format!("the result is not JSON: {e}") },
                    "",
                )
            })?),
            None => None,
        };
    }
    Ok(view)
}

/// The wait's query, or 400 naming the parameter.
fn serde_urlencoded_query(query: &str) -> ApiResult<WaitQuery> {
    let mut timeout_ms = None;
    for (name, value) in form_pairs(query) {
        if name == "timeout_ms" {
            let ms = value.parse::<u64>().ok().filter(|ms| *ms <= MAX_TIMEOUT_MS).ok_or_else(|| {
                ApiError::invalid(
                    "timeout_ms",
                    format!("{value:?}: give a whole number of milliseconds from 0 to {MAX_TIMEOUT_MS}"),
                )
            })?;
            timeout_ms = Some(ms);
        }
    }
    Ok(WaitQuery { timeout_ms })
}

/// The `name=value` pairs of a query string, percent-decoded (`+` is a space).
fn form_pairs(query: &str) -> impl Iterator<Item = (String, String)> + '_ {
    query.split('&').filter(|p| !p.is_empty()).map(|pair| {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        let decode = |s: &str| {
            let s = s.replace('+', " ");
            percent_encoding::percent_decode_str(&s).decode_utf8_lossy().into_owned()
        };
        (decode(name), decode(value))
    })
}
