//! Cancelling running jobs and storing their progress
//! ([`CancelStorage`](jq_core::storage::CancelStorage)): `lua/cancel_request.lua`
//! and `lua/progress.lua`, the progress grouped into script calls as
//! settlements are (settle.rs).

use jq_core::storage::ProgressReport;
use jq_core::{Error, JobId, Result, State};

use crate::admin::queue_of;
use crate::schema::id_hex;
use crate::settle::{Groups, calls};
use crate::{Inner, error, scripts};

/// Cancels job `id` if it has not started, else stores the request on it
/// while it runs (`lua/cancel_request.lua`).
pub(crate) async fn request_cancel(s: &Inner, id: JobId, reason: &str) -> Result<jq_core::storage::CancelAnswer> {
    use jq_core::storage::CancelAnswer;
    let queue = queue_of(s, id).await?;
    let mut cmd = scripts::call(&scripts::CANCEL_REQUEST, &[s.keys.base(queue.as_str())]);
    cmd.arg(s.now_micros()).arg(id_hex(id)).arg(jq_core::storage::cancel_reason(reason)).arg(s.keys.channel());
    let reply: String = s.query(&cmd).await?;
    match reply.as_str() {
        "notfound" => Err(Error::NotFound { id }),
        "now_cancelled" => Ok(CancelAnswer::Cancelled),
        "requested" => Ok(CancelAnswer::Requested),
        other => match other.parse::<State>() {
            Ok(state) => Ok(CancelAnswer::Finished(state)),
            Err(_) => Err(error::unexpected(format!("request_cancel returned {other:?}"))),
        },
    }
}

/// Stores the progress of Running jobs (`lua/progress.lua`), grouped into
/// script calls as settlements are; returns the ids whose lease was lost.
pub(crate) async fn progress(s: &Inner, reports: &[ProgressReport]) -> Result<Vec<JobId>> {
    for report in reports {
        jq_core::storage::check_progress(&report.value)?;
    }
    if reports.is_empty() {
        return Ok(Vec::new());
    }
    let ids: Vec<JobId> = reports.iter().map(|r| r.lease.id).collect();
    let located = s.locate(&ids).await?;
    let mut lost: Vec<JobId> = ids.iter().filter(|id| !located.contains_key(id)).copied().collect();
    let known: Vec<usize> = (0..reports.len()).filter(|&i| located.contains_key(&reports[i].lease.id)).collect();
    let calls = calls(s, &known, |i| &located[&reports[i].lease.id]);
    let cmds: Vec<redis::Cmd> = calls
        .iter()
        .filter(|call| !call.is_empty())
        .map(|call| {
            let groups = Groups::new(s, call.iter().map(|&i| &located[&reports[i].lease.id]));
            let mut cmd = scripts::call(&scripts::PROGRESS, &groups.bases);
            for &i in call {
                let r = &reports[i];
                cmd.arg(groups.index[&located[&r.lease.id]])
                    .arg(id_hex(r.lease.id))
                    .arg(r.lease.token.to_string())
                    .arg(&r.value);
            }
            cmd
        })
        .collect();
    let replies: Vec<Vec<String>> = s.query_each(cmds).await?;
    for hex in replies.into_iter().flatten() {
        if let Some(&i) = known.iter().find(|&&i| id_hex(reports[i].lease.id) == hex) {
            lost.push(reports[i].lease.id);
        }
    }
    Ok(lost)
}
