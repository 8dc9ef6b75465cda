//! Forgetting a conversation, a workspace or a tenant (SPEC §2.7).

use super::*;

/// Forget one conversation, choosing the mode (SPEC §2.7).
pub(super) fn forget_rollout_form(csrf: &str, workspace: &str, layout: &str, rollout: &str) -> Markup {
    html! {
        form class="inline" method="post" action="/console/forget/rollout" data-confirm={"Forget the conversation " (rollout) "? Its file, raw memory and summary are removed and the memory is consolidated without it."} {
            input type="hidden" name="csrf" value=(csrf);
            input type="hidden" name="workspace" value=(workspace);
            input type="hidden" name="layout" value=(layout);
            input type="hidden" name="rollout_id" value=(rollout);
            select name="mode" {
                option value="scrub" selected { "scrub: the agent removes what came only from it" }
                option value="rebuild" { "rebuild: the memory is made again without it" }
            }
            " "
            button type="submit" { "Forget" }
        }
    }
}

#[derive(Deserialize)]
pub struct ForgetRolloutForm {
    csrf: String,
    workspace: String,
    layout: String,
    rollout_id: String,
    mode: Option<String>,
}

pub(super) async fn forget_rollout(
    State(state): State<AppState>,
    signed: Signed,
    Form(form): Form<ForgetRolloutForm>,
) -> Page {
    let tenant = signed.acting_tenant(&form.csrf, &state.console)?;
    signed.require(Permission::Manage)?;
    signed.reach(&form.workspace)?;
    let mode = crate::api::forget::forget_mode(empty_to_none(&form.mode))?;
    let job =
        crate::api::forget::queue_forget_rollout(&state, tenant, &form.workspace, &form.layout, &form.rollout_id, mode)
            .await?;
    state.wake.notify_waiters();
    Ok(page::redirect(&format!("/console/jobs/{}", job.job_id)))
}

#[derive(Deserialize)]
pub struct ForgetWorkspaceForm {
    csrf: String,
    workspace: String,
}

pub(super) async fn forget_workspace(
    State(state): State<AppState>,
    signed: Signed,
    Form(form): Form<ForgetWorkspaceForm>,
) -> Page {
    let tenant = signed.acting_tenant(&form.csrf, &state.console)?;
    signed.require(Permission::Manage)?;
    signed.reach(&form.workspace)?;
    let job = crate::api::forget::queue_forget_workspace(&state, tenant, &form.workspace).await?;
    state.wake.notify_waiters();
    Ok(page::redirect(&format!("/console/jobs/{}", job.job_id)))
}

pub(super) async fn forget_tenant(
    State(state): State<AppState>,
    signed: Signed,
    Path(raw_tenant): Path<String>,
    Form(form): Form<CsrfForm>,
) -> Page {
    signed.check_csrf(&form.csrf, &state.console)?;
    signed.require_admin()?;
    crate::api::forget::queue_forget_tenant(&state, &raw_tenant).await?;
    state.wake.notify_waiters();
    Ok(page::redirect("/console/tenants"))
}
