//! `sidecar.v1.Admin` on a server started with `--enable-admin`: ReloadModels of every model (the
//! files are unchanged: nothing is loaded) and of an unknown model (NOT_FOUND).

use sidecar_client::v1::model_reload::Outcome;
use sidecar_client::v1::ReloadModelsRequest;
use sidecar_client::{Client, Code};

use crate::record::{Case, Recorder};

pub async fn run(rec: &mut Recorder, client: &Client) {
    let reloaded = rec
        .unary(
            Case::ok("reload models: unchanged", "ReloadModels"),
            ReloadModelsRequest::default(),
            |r| client.reload_models(r),
        )
        .await;
    if let Some(response) = reloaded {
        let unchanged = |o: i32| o == Outcome::Unchanged as i32 || o == Outcome::Skipped as i32;
        rec.check(
            "reload models: unchanged",
            !response.models.is_empty() && response.models.iter().all(|m| unchanged(m.outcome)),
            || format!("{response:?}"),
        );
    }
    let unknown = ReloadModelsRequest {
        models: vec!["no-such-model".into()],
        force: true,
    };
    rec.unary(
        Case::err(
            "reload models: unknown model",
            "ReloadModels",
            Code::NotFound,
        ),
        unknown,
        |r| client.reload_models(r),
    )
    .await;
}
