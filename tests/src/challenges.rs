//! Manifests of the local environment's challenge images (`tests/env/images/README.md`), as a
//! CTF platform sends them: a plain Pod, its flag in an environment variable.

use crate::env::real_nodes;

/// Port the `tcp` and `http` images listen on.
pub const CHALLENGE_PORT: u16 = 8080;
/// Port the `lowport` image listens on, as uid 1000.
pub const LOW_PORT: u16 = 80;
/// Port the `udp` image answers datagrams on.
pub const UDP_PORT: u16 = 9999;
/// Port of a [`Run::BannerAndShell`] challenge's shell.
pub const SHELL_PORT: u16 = 9000;
/// Where a [`Run::BannerAndShell`] challenge's emptyDir is mounted.
pub const SCRATCH: &str = "/scratch";

/// A challenge: an image of the environment's registry (or any reference), its port, and an
/// optional readiness probe.
#[derive(Debug, Clone)]
pub struct Challenge {
    pub image: String,
    pub port: u16,
    /// The port's protocol as a manifest spells it: `TCP` or `UDP`.
    pub protocol: &'static str,
    pub flag: String,
    /// `httpGet` on the port, every second.
    pub http_readiness: bool,
    pub env: Vec<(String, String)>,
    /// The container's CPU limit (and request, as the validator makes them equal).
    pub cpu: String,
    /// The container's `securityContext` as YAML, when the author hardens it.
    pub security_context: Option<String>,
    /// The node the pod must run on (a required node affinity to its hostname), if one.
    pub node: Option<String>,
    /// What the container runs.
    pub run: Run,
}

/// What a challenge's container runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Run {
    /// The image's own entrypoint.
    Entrypoint,
    /// A shell script instead (`command: [sh, -c, ...]`).
    Script(String),
    /// The `tcp` image's banner on its port, and on [`SHELL_PORT`] a command for whoever
    /// connects, its output theirs: what a challenge that hands out a shell lets them run.
    /// An emptyDir at [`SCRATCH`] gives the shell room to write, as such challenges do.
    BannerAndShell(String),
}

impl Challenge {
    /// The image `name` of the registry at `registry` (`STACK_ENV_REGISTRY`).
    pub fn local(registry: &str, name: &str) -> Self {
        let (port, protocol) = match name {
            "lowport" => (LOW_PORT, "TCP"),
            "udp" => (UDP_PORT, "UDP"),
            _ => (CHALLENGE_PORT, "TCP"),
        };
        Self {
            protocol,
            ..Self::of_image(&real_nodes::image(registry, name), port)
        }
    }

    pub fn of_image(image: &str, port: u16) -> Self {
        Self {
            image: image.to_owned(),
            port,
            protocol: "TCP",
            flag: format!("CTF{{{:08x}}}", rand::random::<u32>()),
            http_readiness: false,
            env: Vec::new(),
            // Enough that runc's init is not throttled for long: under a 50m CPU quota a pod
            // takes two seconds to start (bench-connect measures it).
            cpu: "200m".to_owned(),
            security_context: None,
            node: None,
            run: Run::Entrypoint,
        }
    }

    pub fn with_http_readiness(mut self) -> Self {
        self.http_readiness = true;
        self
    }

    pub fn with_cpu(mut self, cpu: &str) -> Self {
        cpu.clone_into(&mut self.cpu);
        self
    }

    pub fn with_env(mut self, name: &str, value: &str) -> Self {
        self.env.push((name.to_owned(), value.to_owned()));
        self
    }

    /// With the container's `securityContext`, a YAML flow mapping such as `{runAsUser: 1000}`.
    pub fn with_security_context(mut self, context: &str) -> Self {
        self.security_context = Some(context.to_owned());
        self
    }

    /// Runs `script` (no single quote in it) with the image's `sh` instead of its entrypoint,
    /// as a participant with a shell would.
    pub fn with_script(mut self, script: &str) -> Self {
        self.run = Run::Script(script.to_owned());
        self
    }

    /// Serves the `tcp` image's banner and runs `command` (no quote in it) for whoever connects
    /// to [`SHELL_PORT`] ([`Run::BannerAndShell`]).
    pub fn with_shell_running(mut self, command: &str) -> Self {
        self.run = Run::BannerAndShell(command.to_owned());
        self
    }

    /// Pins the pod to node `name`, as an author may.
    pub fn on_node(mut self, name: &str) -> Self {
        self.node = Some(name.to_owned());
        self
    }

    /// The Pod manifest (YAML).
    pub fn manifest(&self) -> String {
        let container = self.container("challenge");
        let node = self
            .node
            .as_ref()
            .map(|name| {
                format!(
                    "  affinity:\n    nodeAffinity:\n      requiredDuringSchedulingIgnoredDuringExecution:\n        nodeSelectorTerms:\n          - matchExpressions:\n              - {{key: kubernetes.io/hostname, operator: In, values: [{name}]}}\n"
                )
            })
            .unwrap_or_default();
        let volumes = if matches!(self.run, Run::BannerAndShell(_)) {
            "  volumes:\n    - name: scratch\n      emptyDir: {}\n"
        } else {
            ""
        };
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: challenge\n  labels:\n    challenge: stack-env\nspec:\n{node}{volumes}  containers:\n{container}"
        )
    }

    /// The challenge as container `name`, an item of a Pod manifest's `containers` (YAML).
    pub fn container(&self, name: &str) -> String {
        let mut env = format!("        - name: FLAG\n          value: \"{}\"\n", self.flag);
        for (name, value) in &self.env {
            env.push_str(&format!("        - name: {name}\n          value: \"{value}\"\n"));
        }
        let probe = if self.http_readiness {
            format!(
                "      readinessProbe:\n        httpGet:\n          path: /\n          port: {}\n        periodSeconds: 1\n",
                self.port
            )
        } else {
            String::new()
        };
        let security = self
            .security_context
            .as_ref()
            .map(|context| format!("      securityContext: {context}\n"))
            .unwrap_or_default();
        let (script, shell) = match &self.run {
            Run::Entrypoint => (None, String::new()),
            Run::Script(script) => (Some(script.clone()), String::new()),
            Run::BannerAndShell(command) => (
                Some(format!(
                    "nc -ll -p {port} -e /bin/banner & nc -l -p {SHELL_PORT} -e sh -c \"{command} 2>&1\"; wait",
                    port = self.port
                )),
                format!(
                    "        - containerPort: {SHELL_PORT}\n      volumeMounts:\n        - name: scratch\n          mountPath: {SCRATCH}\n"
                ),
            ),
        };
        let command = script
            .map(|script| format!("      command: [sh, -c, '{script}']\n"))
            .unwrap_or_default();
        format!(
            "    - name: {name}\n      image: {image}\n{command}      ports:\n        - containerPort: {port}\n          protocol: {protocol}\n{shell}      env:\n{env}{probe}{security}      resources:\n        limits:\n          cpu: {cpu}\n          memory: 32Mi\n",
            image = self.image,
            cpu = self.cpu,
            port = self.port,
            protocol = self.protocol,
        )
    }
}
