import pandas as pd
from rdkit import Chem, RDLogger
from rdkit.Chem import Crippen

RDLogger.DisableLog("rdApp.*")
ORGANIC = {"C", "N", "O", "S", "F", "Cl", "Br"}
rows = []
for s in pd.read_csv("data/ogbg_molhiv/mapping/mol.csv.gz")["smiles"]:
    mol = Chem.MolFromSmiles(s)
    if mol is not None and mol.GetNumAtoms() <= 40 and \
            all(a.GetSymbol() in ORGANIC for a in mol.GetAtoms()):
        rows.append({"smiles": s, "logp": round(Crippen.MolLogP(mol), 3)})
    if len(rows) == 300:
        break
frame = pd.DataFrame(rows)
frame["split"] = ["train"] * 240 + ["val"] * 30 + ["test"] * 30
frame.to_csv("my.csv", index=False)
frame[["smiles"]].iloc[270:].to_csv("new.csv", index=False)
print(frame.head(3).to_string(index=False))
