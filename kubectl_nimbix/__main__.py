"""`kubectl nimbix` (console script `kubectl-nimbix`): argument parsing, the reads, the output.

    kubectl nimbix status [-n NS | -A] [--remote] [-o table|json]
    kubectl nimbix budget [--addon-namespace NS] [-o table|json]
    kubectl nimbix explain POD [-n NS] [-o table|json]

It reads only the API server (no JARVICE credentials): what the webhook and the controller wrote
on the pods, the namespaces' budgets and cost caps, and the controller's spend record.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence

from kubectl_nimbix import views
from kubeplumbing import spendrecord

EXIT_ERROR = 1  # as kubectl exits on an error


def _connection_options(parser: argparse.ArgumentParser, *, default: str | None) -> None:
    """--kubeconfig/--context, before or after the command (kubectl passes them where they were typed):
    the command's copies default to SUPPRESS so they never hide the values given before it."""
    parser.add_argument(
        "--kubeconfig", default=default if default is not None else argparse.SUPPRESS, help="kubeconfig file"
    )
    parser.add_argument(
        "--context", default=default if default is not None else argparse.SUPPRESS, help="kubeconfig context"
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kubectl nimbix", description="Burst pods, their JARVICE jobs, budgets and decisions."
    )
    _connection_options(parser, default="")
    common = argparse.ArgumentParser(add_help=False)
    _connection_options(common, default=None)
    common.add_argument("-o", "--output", choices=("table", "json"), default="table", help="output format")
    commands = parser.add_subparsers(dest="command", required=True)
    status = commands.add_parser("status", parents=[common], help="decided pods with their JARVICE job and cost")
    scope = status.add_mutually_exclusive_group()
    scope.add_argument("-n", "--namespace", default="", help="this namespace (default: the context's)")
    scope.add_argument("-A", "--all-namespaces", action="store_true", help="every namespace")
    status.add_argument("--remote", action="store_true", help="only pods decided remote")
    budget = commands.add_parser("budget", parents=[common], help="each namespace's remote GPUs against its budget")
    budget.add_argument(
        "--gpu-resources",
        default="nvidia.com/gpu,alpha.kubernetes.io/nvidia-gpu",
        help="the webhook's --gpu-resources (for pods burst before it recorded remote-gpus)",
    )
    budget.add_argument(
        "--addon-namespace",
        default="nimbix-burst",
        help="the add-on's namespace, where the controller keeps the spend record (ConfigMap nimbix-burst-spend)",
    )
    explain = commands.add_parser("explain", parents=[common], help="why a pod was decided as it was")
    explain.add_argument("pod", help="the pod's name")
    explain.add_argument("-n", "--namespace", default="", help="its namespace (default: the context's)")
    return parser


def _read_spend(api: object, *, namespace: str) -> tuple[spendrecord.SpendRecord | None, str]:
    """The controller's spend record, or None and why not."""
    from kubectl_nimbix import kubeapi  # noqa: PLC0415

    try:
        data = kubeapi.read_configmap_data(api, namespace=namespace, name=spendrecord.CONFIGMAP_NAME)
    except kubeapi.ApiError as exc:
        return None, str(exc)
    if spendrecord.RECORD_KEY not in data:
        return None, f"configmap {namespace}/{spendrecord.CONFIGMAP_NAME} has no {spendrecord.RECORD_KEY}"
    try:
        return spendrecord.parse_spend_record(data[spendrecord.RECORD_KEY]), ""
    except spendrecord.SpendRecordError as exc:
        return None, str(exc)


def run(args: argparse.Namespace) -> str:
    from kubectl_nimbix import kubeapi  # noqa: PLC0415 - `--help` works without the kubernetes client

    api = kubeapi.connect(kubeconfig=args.kubeconfig, context=args.context)
    as_json = args.output == "json"
    if args.command == "status":
        namespace = ""
        if not args.all_namespaces:
            namespace = args.namespace or kubeapi.current_namespace(kubeconfig=args.kubeconfig, context=args.context)
        rows = views.build_status_rows(kubeapi.list_burst_pods(api, namespace=namespace), remote_only=args.remote)
        if as_json:
            return views.format_json(rows)
        if not rows:
            where = "any namespace" if args.all_namespaces else f"namespace {namespace}"
            return f"No decided pods found in {where}.\n"
        return views.format_status(rows, all_namespaces=args.all_namespaces)
    if args.command == "budget":
        resources = [r.strip() for r in args.gpu_resources.split(",") if r.strip()]
        spend, spend_problem = _read_spend(api, namespace=args.addon_namespace)
        budget_rows, problems = views.build_budget_rows(
            kubeapi.list_namespaces(api),
            kubeapi.list_burst_pods(api, namespace=""),
            gpu_resources=resources,
            spend=spend,
            now=time.time(),
        )
        for problem in [*problems, *([f"spend record: {spend_problem}"] if spend_problem else [])]:
            print(f"warning: {problem}", file=sys.stderr)  # noqa: T201 - the plugin's output is its interface
        if as_json:
            return views.format_json(budget_rows)
        if not budget_rows:
            return "No namespace has a budget, a cost cap, burst pods or spend.\n"
        return views.format_budget(budget_rows, spend=spend, spend_problem=spend_problem)
    namespace = args.namespace or kubeapi.current_namespace(kubeconfig=args.kubeconfig, context=args.context)
    fields = views.explain_pod(kubeapi.read_pod(api, namespace=namespace, name=args.pod))
    return views.explain_json(fields) if as_json else views.format_explain(fields)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    try:
        from kubectl_nimbix import kubeapi  # noqa: PLC0415
    except ImportError as exc:
        print(f"error: {exc}; install the plugin with: pip install 'nimbix-burst[kubectl]'", file=sys.stderr)  # noqa: T201
        return EXIT_ERROR
    try:
        sys.stdout.write(run(args))
    except kubeapi.ApiError as exc:
        print(f"error: {exc}", file=sys.stderr)  # noqa: T201
        return EXIT_ERROR
    return 0


if __name__ == "__main__":
    sys.exit(main())
