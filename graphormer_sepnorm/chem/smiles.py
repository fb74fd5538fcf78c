"""Parsing SMILES with RDKit into molecules, with a short reason for the user when it fails."""

from __future__ import annotations

import math
import re
from typing import Any

from rdkit import Chem, rdBase

_LOG_PREFIX = re.compile(r'^\[\d\d:\d\d:\d\d\]\s*(SMILES Parse Error:\s*)?')


class FeaturizationError(ValueError):
    """A SMILES that cannot be featurized; the message is a short reason for the user."""


def _rdkit_reason(messages: str) -> str:
    """First informative line of RDKit's error log, without timestamp, at most 160 chars."""
    for line in messages.splitlines():
        if line := ' '.join(_LOG_PREFIX.sub('', line).split()):
            return line if len(line) <= 160 else line[:157] + '...'
    return ''


def _invalid(log: str) -> str:
    reason = _rdkit_reason(log)
    return f'invalid SMILES: {reason}' if reason else 'invalid SMILES'


def _parse_log(text: str) -> str:
    """What RDKit logs while failing to parse ``text`` (empty before RDKit 2026.09)."""
    capture = getattr(rdBase, 'CaptureErrorLog', None)
    if capture is None:
        return ''
    with rdBase.BlockLogs(), capture() as captured:
        Chem.MolFromSmiles(text)
    return captured.messages


def parse_smiles(smiles: Any) -> Chem.Mol:
    """Parses a SMILES (stripped) with RDKit, sanitized, keeping RDKit's log off stderr.

    ``None`` and NaN (an empty CSV cell read by pandas) count as empty SMILES.

    Raises:
        FeaturizationError: ``empty SMILES``, ``invalid SMILES: <RDKit's reason>``, ...
    """
    if smiles is None or (isinstance(smiles, float) and math.isnan(smiles)):
        raise FeaturizationError('empty SMILES')
    if not isinstance(smiles, str):
        raise FeaturizationError(f'expected a SMILES string, got {type(smiles).__name__}')
    text = smiles.strip()
    if not text:
        raise FeaturizationError('empty SMILES')
    with rdBase.BlockLogs():
        try:
            mol = Chem.MolFromSmiles(text)
        except Exception as e:  # RDKit raises for a few pathological strings
            raise FeaturizationError(_invalid(str(e))) from None
    if mol is None:  # parse again to read why: capturing RDKit's log costs every good row too
        raise FeaturizationError(_invalid(_parse_log(text)))
    if mol.GetNumAtoms() == 0:
        raise FeaturizationError('molecule has 0 atoms')
    return mol
