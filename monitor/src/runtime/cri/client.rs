//! The CRI v1 client: gRPC over a container runtime's unix socket (containerd's CRI plugin),
//! with a deadline on every call. Types and stubs are generated at build time from
//! `proto/runtime/v1/api.proto`.
use std::path::{Path, PathBuf};
use std::time::Duration;

use hyper_util::rt::TokioIo;
use tonic::transport::{Channel, Endpoint, Uri};

use super::api;
use super::api::image_service_client::ImageServiceClient;
use super::api::runtime_service_client::RuntimeServiceClient;

/// How long one call may take before it fails. Stopping a container waits for its grace
/// period on top of this (see [`CriClient::stop_container`]).
const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// A failed CRI call: which call, on which socket, and the runtime's answer.
#[derive(Debug, thiserror::Error)]
pub enum CriError {
    #[error("CRI endpoint {endpoint:?}: {message}")]
    Endpoint { endpoint: String, message: String },
    #[error("CRI {call} on {socket}: {status}", socket = .socket.display())]
    Call {
        call: &'static str,
        socket: PathBuf,
        status: Box<tonic::Status>,
    },
}

impl CriError {
    /// The runtime answered NotFound (the object is already gone).
    pub(crate) fn is_not_found(&self) -> bool {
        matches!(self, CriError::Call { status, .. } if status.code() == tonic::Code::NotFound)
    }
}

/// The unix socket path of a `containerRuntimeEndpoint` ("unix:///run/x.sock" or a bare
/// absolute path, as the kubelet accepts).
pub fn socket_of_endpoint(endpoint: &str) -> Result<PathBuf, CriError> {
    let path = endpoint.strip_prefix("unix://").unwrap_or(endpoint);
    if !path.starts_with('/') {
        return Err(CriError::Endpoint {
            endpoint: endpoint.to_string(),
            message: "only unix sockets are supported: expected unix:///absolute/path".into(),
        });
    }
    Ok(PathBuf::from(path))
}

/// A connection to one runtime. Cheap to clone: clones share the HTTP/2 connection.
#[derive(Clone, Debug)]
pub struct CriClient {
    socket: PathBuf,
    runtime: RuntimeServiceClient<Channel>,
    images: ImageServiceClient<Channel>,
}

impl CriClient {
    /// A client of the runtime at `socket`. The connection is made lazily, at the first
    /// call, and re-made after the runtime restarts.
    pub fn new(socket: &Path) -> Result<CriClient, CriError> {
        let endpoint =
            Endpoint::try_from("http://cri.invalid").map_err(|e| CriError::Endpoint {
                endpoint: socket.display().to_string(),
                message: e.to_string(),
            })?;
        let path = socket.to_path_buf();
        let channel = endpoint
            .timeout(CALL_TIMEOUT)
            .connect_timeout(Duration::from_secs(5))
            .connect_with_connector_lazy(tower::service_fn(move |_: Uri| {
                let path = path.clone();
                async move {
                    let stream = tokio::net::UnixStream::connect(path).await?;
                    Ok::<_, std::io::Error>(TokioIo::new(stream))
                }
            }));
        Ok(CriClient {
            socket: socket.to_path_buf(),
            runtime: RuntimeServiceClient::new(channel.clone()),
            images: ImageServiceClient::new(channel),
        })
    }

    fn fail(&self, call: &'static str) -> impl FnOnce(tonic::Status) -> CriError + '_ {
        move |status| CriError::Call {
            call,
            socket: self.socket.clone(),
            status: Box::new(status),
        }
    }

    pub(crate) async fn version(&self) -> Result<api::VersionResponse, CriError> {
        let request = api::VersionRequest {
            version: "v1".into(),
        };
        Ok(self
            .runtime
            .clone()
            .version(request)
            .await
            .map_err(self.fail("Version"))?
            .into_inner())
    }

    /// The image the runtime makes sandboxes from (containerd's `sandbox_image`, from the
    /// verbose runtime status), if it says. The image collector treats it as pinned: every
    /// new pod needs it.
    pub(crate) async fn sandbox_image(&self) -> Result<Option<String>, CriError> {
        let response = self
            .runtime
            .clone()
            .status(api::StatusRequest { verbose: true })
            .await
            .map_err(self.fail("Status"))?
            .into_inner();
        Ok(response
            .info
            .get("config")
            .and_then(|config| serde_json::from_str::<serde_json::Value>(config).ok())
            .and_then(|config| Some(config.get("sandboxImage")?.as_str()?.to_string()))
            .filter(|image| !image.is_empty()))
    }

    pub async fn run_pod_sandbox(&self, config: api::PodSandboxConfig) -> Result<String, CriError> {
        let request = api::RunPodSandboxRequest {
            config: Some(config),
            runtime_handler: String::new(),
        };
        Ok(self
            .runtime
            .clone()
            .run_pod_sandbox(request)
            .await
            .map_err(self.fail("RunPodSandbox"))?
            .into_inner()
            .pod_sandbox_id)
    }

    /// Stops every container of the sandbox at once (no grace) and the sandbox itself.
    /// Idempotent: a sandbox already gone is not an error.
    pub async fn stop_pod_sandbox(&self, id: &str) -> Result<(), CriError> {
        let request = api::StopPodSandboxRequest {
            pod_sandbox_id: id.to_string(),
        };
        match self.runtime.clone().stop_pod_sandbox(request).await {
            Err(status) if status.code() == tonic::Code::NotFound => Ok(()),
            other => other.map(drop).map_err(self.fail("StopPodSandbox")),
        }
    }

    /// Removes a stopped sandbox and its containers. A sandbox already gone is not an error.
    pub(crate) async fn remove_pod_sandbox(&self, id: &str) -> Result<(), CriError> {
        let request = api::RemovePodSandboxRequest {
            pod_sandbox_id: id.to_string(),
        };
        match self.runtime.clone().remove_pod_sandbox(request).await {
            Err(status) if status.code() == tonic::Code::NotFound => Ok(()),
            other => other.map(drop).map_err(self.fail("RemovePodSandbox")),
        }
    }

    pub async fn list_pod_sandboxes(&self) -> Result<Vec<api::PodSandbox>, CriError> {
        Ok(self
            .runtime
            .clone()
            .list_pod_sandbox(api::ListPodSandboxRequest { filter: None })
            .await
            .map_err(self.fail("ListPodSandbox"))?
            .into_inner()
            .items)
    }

    pub async fn create_container(
        &self,
        sandbox_id: &str,
        config: api::ContainerConfig,
        sandbox_config: api::PodSandboxConfig,
    ) -> Result<String, CriError> {
        let request = api::CreateContainerRequest {
            pod_sandbox_id: sandbox_id.to_string(),
            config: Some(config),
            sandbox_config: Some(sandbox_config),
        };
        Ok(self
            .runtime
            .clone()
            .create_container(request)
            .await
            .map_err(self.fail("CreateContainer"))?
            .into_inner()
            .container_id)
    }

    pub async fn start_container(&self, id: &str) -> Result<(), CriError> {
        let request = api::StartContainerRequest {
            container_id: id.to_string(),
        };
        self.runtime
            .clone()
            .start_container(request)
            .await
            .map_err(self.fail("StartContainer"))?;
        Ok(())
    }

    /// Stops a container: SIGTERM, SIGKILL after `grace` (0: at once). The call's
    /// deadline is the grace period plus the usual call timeout. A container already gone
    /// is not an error.
    pub(crate) async fn stop_container(&self, id: &str, grace: Duration) -> Result<(), CriError> {
        let mut request = tonic::Request::new(api::StopContainerRequest {
            container_id: id.to_string(),
            timeout: i64::try_from(grace.as_secs()).unwrap_or(i64::MAX),
        });
        request.set_timeout(grace.saturating_add(CALL_TIMEOUT));
        match self.runtime.clone().stop_container(request).await {
            Err(status) if status.code() == tonic::Code::NotFound => Ok(()),
            other => other.map(drop).map_err(self.fail("StopContainer")),
        }
    }

    /// Removes an exited container (and its log). A container already gone is not an error.
    pub(crate) async fn remove_container(&self, id: &str) -> Result<(), CriError> {
        let request = api::RemoveContainerRequest {
            container_id: id.to_string(),
        };
        match self.runtime.clone().remove_container(request).await {
            Err(status) if status.code() == tonic::Code::NotFound => Ok(()),
            other => other.map(drop).map_err(self.fail("RemoveContainer")),
        }
    }

    pub async fn list_containers(&self) -> Result<Vec<api::Container>, CriError> {
        Ok(self
            .runtime
            .clone()
            .list_containers(api::ListContainersRequest { filter: None })
            .await
            .map_err(self.fail("ListContainers"))?
            .into_inner()
            .containers)
    }

    /// A container's status, and its main process's host pid (from the verbose info
    /// containerd adds; `None` when the runtime gives none or the container is not running).
    pub(crate) async fn container_status(
        &self,
        id: &str,
    ) -> Result<(api::ContainerStatus, Option<u32>), CriError> {
        let request = api::ContainerStatusRequest {
            container_id: id.to_string(),
            verbose: true,
        };
        let response = self
            .runtime
            .clone()
            .container_status(request)
            .await
            .map_err(self.fail("ContainerStatus"))?
            .into_inner();
        let pid = response
            .info
            .get("info")
            .and_then(|info| serde_json::from_str::<serde_json::Value>(info).ok())
            .and_then(|info| info.get("pid")?.as_u64())
            .and_then(|pid| u32::try_from(pid).ok())
            .filter(|pid| *pid > 0);
        let status = response.status.ok_or_else(|| CriError::Call {
            call: "ContainerStatus",
            socket: self.socket.clone(),
            status: Box::new(tonic::Status::internal("the answer has no status")),
        })?;
        Ok((status, pid))
    }

    pub(crate) async fn image_status(&self, image: &str) -> Result<Option<api::Image>, CriError> {
        let request = api::ImageStatusRequest {
            image: Some(image_spec(image)),
            verbose: false,
        };
        Ok(self
            .images
            .clone()
            .image_status(request)
            .await
            .map_err(self.fail("ImageStatus"))?
            .into_inner()
            .image)
    }

    pub(crate) async fn pull_image(&self, image: &str) -> Result<String, CriError> {
        let mut request = tonic::Request::new(api::PullImageRequest {
            image: Some(image_spec(image)),
            auth: None,
            sandbox_config: None,
        });
        // A pull may be slow; it still must end.
        request.set_timeout(Duration::from_secs(300));
        Ok(self
            .images
            .clone()
            .pull_image(request)
            .await
            .map_err(self.fail("PullImage"))?
            .into_inner()
            .image_ref)
    }

    pub async fn list_images(&self) -> Result<Vec<api::Image>, CriError> {
        Ok(self
            .images
            .clone()
            .list_images(api::ListImagesRequest { filter: None })
            .await
            .map_err(self.fail("ListImages"))?
            .into_inner()
            .images)
    }

    /// Removes an image by id or reference. An image already gone is not an error.
    pub(crate) async fn remove_image(&self, image: &str) -> Result<(), CriError> {
        let request = api::RemoveImageRequest {
            image: Some(image_spec(image)),
        };
        self.images
            .clone()
            .remove_image(request)
            .await
            .map_err(self.fail("RemoveImage"))?;
        Ok(())
    }

    pub(crate) async fn image_fs_info(&self) -> Result<api::ImageFsInfoResponse, CriError> {
        Ok(self
            .images
            .clone()
            .image_fs_info(api::ImageFsInfoRequest {})
            .await
            .map_err(self.fail("ImageFsInfo"))?
            .into_inner())
    }
}

fn image_spec(image: &str) -> api::ImageSpec {
    api::ImageSpec {
        image: image.to_string(),
        ..api::ImageSpec::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_name_unix_sockets() {
        assert_eq!(
            socket_of_endpoint("unix:///run/containerd/containerd.sock").unwrap(),
            PathBuf::from("/run/containerd/containerd.sock")
        );
        assert_eq!(
            socket_of_endpoint("/run/x.sock").unwrap(),
            PathBuf::from("/run/x.sock")
        );
        let err = socket_of_endpoint("tcp://10.0.0.1:1234").unwrap_err();
        assert!(err.to_string().contains("only unix sockets"), "{err}");
        assert!(socket_of_endpoint("unix://relative.sock").is_err());
    }
}
