"""Reading templates for the local AWS: short tags, parameters, conditions, intrinsics, ordering;
and Lambda's rules for a partial batch response. No server needed."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentwake_local.poller import InvalidBatchResponse, batch_item_failures
from agentwake_local.template import TemplateError, load_template, parse_template, provision

UNREACHABLE = "http://127.0.0.1:9"  # provisioning must fail before talking to AWS


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "template.yaml"
    path.write_text(text)
    return path


def test_short_tags_become_long_form_intrinsics() -> None:
    # GIVEN YAML using every short form
    text = """
Resources:
  R:
    Type: AWS::SQS::Queue
    Properties:
      A: !Ref X
      B: !GetAtt Q.Arn
      C: !Sub "${AWS::Region}-${Q.QueueName}"
      D: !If [Cond, !Join ["-", [a, b]], !Ref AWS::NoValue]
      E: !Select [0, !Split [",", "x,y"]]
      F: !Equals [a, b]
      G: !GetAtt [Q, Arn]
      H: !Condition Cond
      I: 2024-01-01
"""
    # WHEN it is parsed
    props = parse_template(text)["Resources"]["R"]["Properties"]

    # THEN each tag is the JSON long form CloudFormation uses (and dates stay strings)
    assert props == {
        "A": {"Ref": "X"},
        "B": {"Fn::GetAtt": ["Q", "Arn"]},
        "C": {"Fn::Sub": "${AWS::Region}-${Q.QueueName}"},
        "D": {"Fn::If": ["Cond", {"Fn::Join": ["-", ["a", "b"]]}, {"Ref": "AWS::NoValue"}]},
        "E": {"Fn::Select": [0, {"Fn::Split": [",", "x,y"]}]},
        "F": {"Fn::Equals": ["a", "b"]},
        "G": {"Fn::GetAtt": ["Q", "Arn"]},
        "H": {"Condition": "Cond"},
        "I": "2024-01-01",
    }


def test_parameters_take_defaults_and_overrides_and_conditions_follow(tmp_path: Path) -> None:
    # GIVEN parameters of several types and conditions combining them
    path = write(
        tmp_path,
        """
Parameters:
  Stage: { Type: String, Default: dev, AllowedValues: [dev, prod] }
  Count: { Type: Number, Default: 3 }
  Names: { Type: CommaDelimitedList, Default: "a,b" }
  Flag: { Type: String, Default: true }
Conditions:
  IsProd: !Equals [!Ref Stage, prod]
  IsDev: !Not [!Condition IsProd]
  CountIsThree: !Equals [!Ref Count, 3]
  Both: !And [!Condition IsDev, !Condition CountIsThree]
  Either: !Or [!Condition IsProd, !Equals [!Select [1, !Ref Names], b]]
Resources: {}
""",
    )

    # WHEN loaded with defaults, then with an override
    default = load_template(path)
    prod = load_template(path, {"Stage": "prod", "Count": 4})

    # THEN Ref values are strings (lists for list types) and conditions are decided from them
    assert default.parameters == {"Stage": "dev", "Count": "3", "Names": ["a", "b"], "Flag": "true"}
    assert default.conditions == {"IsProd": False, "IsDev": True, "CountIsThree": True, "Both": True, "Either": True}
    assert prod.conditions == {"IsProd": True, "IsDev": False, "CountIsThree": False, "Both": False, "Either": True}


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"Typo": "x"}, "undeclared parameters: Typo"),
        ({"Stage": "qa"}, "is not one of"),
    ],
)
def test_bad_parameter_overrides_are_refused(tmp_path: Path, overrides: dict, message: str) -> None:
    # GIVEN a template with one constrained parameter
    path = write(
        tmp_path,
        "Parameters:\n  Stage: { Type: String, Default: dev, AllowedValues: [dev, prod] }\nResources: {}\n",
    )

    # WHEN loading it with a bad override
    # THEN it is refused with a clear message
    with pytest.raises(TemplateError, match=message):
        load_template(path, overrides)


def test_a_parameter_without_default_needs_an_override(tmp_path: Path) -> None:
    # GIVEN a parameter with no Default
    path = write(tmp_path, "Parameters:\n  Secret: { Type: String }\nResources: {}\n")

    # WHEN loading without an override / THEN it fails; with one, it loads
    with pytest.raises(TemplateError, match="Secret has no Default"):
        load_template(path)
    assert load_template(path, {"Secret": "s"}).parameters == {"Secret": "s"}


def test_a_dependency_cycle_is_reported(tmp_path: Path) -> None:
    # GIVEN two queues whose redrive policies point at each other
    path = write(
        tmp_path,
        """
Resources:
  A:
    Type: AWS::SQS::Queue
    Properties: { RedrivePolicy: { deadLetterTargetArn: !GetAtt B.Arn, maxReceiveCount: 1 } }
  B:
    Type: AWS::SQS::Queue
    Properties: { RedrivePolicy: { deadLetterTargetArn: !GetAtt A.Arn, maxReceiveCount: 1 } }
""",
    )

    # WHEN provisioning / THEN the cycle is named before anything is created
    with pytest.raises(TemplateError, match="dependency cycle between A, B"):
        provision(load_template(path), UNREACHABLE)


def test_an_unknown_reference_in_a_function_is_an_error(tmp_path: Path) -> None:
    # GIVEN a function whose environment refers to a resource that does not exist
    path = write(
        tmp_path,
        """
Resources:
  Fn:
    Type: AWS::Serverless::Function
    Properties:
      Handler: m.h
      Environment: { Variables: { X: !Ref Missing } }
""",
    )

    # WHEN provisioning / THEN the error names the function property and the id
    with pytest.raises(TemplateError, match="Fn.Environment: unknown logical id 'Missing'"):
        provision(load_template(path), UNREACHABLE)


def test_plain_cloudformation_lambda_resources_are_understood(tmp_path: Path) -> None:
    # GIVEN a plain AWS::Lambda::Function with an EventInvokeConfig resource (no SAM, no AWS calls)
    path = write(
        tmp_path,
        """
Resources:
  Fn:
    Type: AWS::Lambda::Function
    Properties:
      Handler: m.h
      Timeout: 9
      MemorySize: 1024
      Role: arn:aws:iam::123456789012:role/x
  FnConfig:
    Type: AWS::Lambda::EventInvokeConfig
    Properties:
      FunctionName: !Ref Fn
      Qualifier: $LATEST
      MaximumRetryAttempts: 0
      DestinationConfig:
        OnFailure: { Destination: arn:aws:sqs:us-east-1:123456789012:elsewhere }
""",
    )

    # WHEN provisioning
    stack = provision(load_template(path, stack_name="s"), UNREACHABLE)

    # THEN the function and its async config are read; the destination type comes from the ARN
    function = stack.functions["Fn"]
    assert (function.name, function.timeout, function.memory_size) == ("s-Fn", 9, 1024)
    config = function.event_invoke_config
    assert config is not None
    assert config.maximum_retry_attempts == 0
    assert config.on_failure is not None and config.on_failure.type == "SQS"


@pytest.mark.parametrize(
    ("response", "failed"),
    [
        (None, set()),
        ({}, set()),
        ({"batchItemFailures": None}, set()),
        ({"batchItemFailures": []}, set()),
        ({"batchItemFailures": [{"itemIdentifier": "m2"}]}, {"m2"}),
    ],
)
def test_valid_batch_responses(response: object, failed: set[str]) -> None:
    # GIVEN a batch of m1, m2 / WHEN the function returns a valid response / THEN these are retried
    assert batch_item_failures(response, ["m1", "m2"]) == failed


@pytest.mark.parametrize(
    "response",
    [
        "done",
        {"batchItemFailures": "m1"},
        {"batchItemFailures": [{"itemIdentifier": ""}]},
        {"batchItemFailures": [{"itemIdentifier": None}]},
        {"batchItemFailures": [{"id": "m1"}]},
        {"batchItemFailures": [{"itemIdentifier": "not-in-batch"}]},
    ],
)
def test_invalid_batch_responses_fail_the_whole_batch(response: object) -> None:
    # GIVEN a batch of m1, m2 / WHEN the function returns an invalid response
    # THEN Lambda treats it as a complete failure
    with pytest.raises(InvalidBatchResponse):
        batch_item_failures(response, ["m1", "m2"])
