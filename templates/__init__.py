"""Cookiecutter templates of `qnndeploy scaffold`; installed as the package qnndeploy.templates."""
