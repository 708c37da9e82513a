package ngram

import "strings"

// Word classes. A word of a class adds, besides its own features, the
// class's: the class alone and the pair it makes with the class of the
// segment's previous classed word. The model learns their weights like any
// other feature's; what the classes add is that a word seen once, or
// never, in training ("Copilot", "отправь") weighs like the others of its
// class, and that "assistant ... send ... password" is one pattern
// whatever stands between the words.
//
// The lists hold the five languages the multilingual families cover
// besides English. An entry ending in "*" is a prefix (of at least four
// bytes once normalized; it is cut to 8, 6 or 4 bytes), the others whole
// words. Chinese entries are runs of two or three characters.
var classWords = [][]string{
	1: { // the model, addressed
		"ai", "llm", "llms", "assistant*", "chatbot*", "bot", "bots", "agent*", "model", "models", "copilot*", "gpt*", "chatgpt",
		"claude", "gemini", "automated", "ia", "ki", "assistente*", "asistente*", "ассистент*", "помощник*", "нейросет*", "бот",
		"модель*", "助手", "模型", "人工智能", "机器人", "智能体", "модел*", "assistent*", "orchestrator*",
	},
	2: { // actions with an effect outside the answer
		"send*", "forward*", "transfer*", "wire", "upload*", "post", "email", "delete*", "remove*", "erase", "approve*",
		"grant*", "disable*", "create", "invite*", "reset", "export*", "share", "merge", "book", "refund*", "cancel*",
		"fetch*", "visit*", "render*", "include", "insert*", "append*", "embed*", "execute", "install*", "click", "download*",
		"submit*", "leak", "exfiltrat*", "attach*", "publish*", "rotate", "envoie*", "envoye*", "transfere*", "supprime*",
		"partage*", "ajoute*", "execute*", "sende", "senden", "schick*", "uberweis*", "losch*", "teile", "fuge", "offne",
		"envia*", "reenvia*", "transfiere*", "elimina*", "borra*", "comparte*", "anade*", "ejecuta*", "aprueba*",
		"отправ*", "перешли*", "переведи*", "удали*", "выполни*", "发送", "转发", "删除", "上传", "转账", "执行", "批准",
	},
	3: { // secrets
		"password*", "passwd", "passcode*", "credential*", "token*", "secret*", "apikey", "api", "otp", "2fa", "mfa", "ssh",
		"pin", "cookie*", "session*", "env", "passwort*", "kennwort*", "zugangsdaten", "schlussel*", "identifiant*", "jeton*",
		"contrasena*", "credencial*", "пароль*", "пароля", "токен*", "ключ*", "логин*", "密码", "密钥", "令牌", "验证码",
	},
	4: { // authority
		"security", "administrator*", "admin", "admins", "helpdesk", "compliance", "official", "operator*", "developer*",
		"vendor*", "support", "audit*", "ciso", "soc", "securite", "administrateur*", "developpeur*", "sicherheit*",
		"entwickler*", "seguridad", "administrador*", "desarrollador*", "безопасност*", "администратор*", "разработчик*",
		"安全", "管理员", "开发者", "开发人员", "platform*", "director*", "ceo", "cfo", "officer*", "legal", "supervisor*",
		"owner", "plateforme", "direktor*", "geschaftsfuhrung", "plataforma", "руководств*", "平台", "运营",
	},
	5: { // instructions and overriding them
		"ignore*", "disregard*", "forget", "override*", "bypass*", "instruction*", "prompt*", "rules", "guideline*",
		"previous", "prior", "restriction*", "unrestricted", "filters", "ignor*", "oublie*", "consigne*", "regles",
		"precedent*", "vergiss", "vergessen", "anweisung*", "regeln", "vorherig*", "bisherig*", "olvida*", "instruccion*",
		"reglas", "anterior*", "игнорир*", "забудь*", "инструкци*", "правил*", "предыдущ*", "прежни*", "忽略", "忘记",
		"指令", "规则", "之前", "提示词",
	},
	6: { // urgency and stealth
		"immediately", "urgent*", "silently", "quietly", "secretly", "mandatory", "hidden", "asap", "immediatement",
		"silencieusement", "sofort", "unbedingt", "heimlich", "inmediatamente", "urgente", "немедленно", "срочно", "тайно",
		"立即", "立刻", "马上", "悄悄",
	},
	7: { // the user, in the third person
		"user", "users", "user's", "utilisateur*", "nutzer*", "benutzer*", "usuario*", "пользовател*", "用户",
	},
	8: { // the reader, in the second person
		"you", "your", "yours", "yourself", "tu", "vous", "ton", "ta", "tes", "votre", "du", "dein", "deine", "deinen",
		"dich", "dir", "tus", "usted", "ты", "тебе", "тебя", "твой", "твои", "твоя", "вы", "你", "您",
	},
	9: { // talking about attacks rather than making one
		"attack*", "injection*", "payload*", "example*", "researcher*", "vulnerabilit*", "cve", "advisory", "detect*",
		"scanner*", "classifier*", "malicious", "phishing", "exploit*", "mitigat*", "threat*", "incident*", "quote*",
		"quoted", "phrase*", "string*", "tests", "benchmark*", "canary", "adversarial", "jailbreak*", "red-team", "attaque*",
		"exemple*", "angriff*", "angreifer*", "beispiel*", "ataque*", "atacante*", "ejemplo*", "атак*", "злоумышленник*",
		"пример*", "инъекци*", "攻击", "注入", "例如", "示例",
	},
	10: { // taking on a role
		"pretend*", "act", "roleplay*", "persona", "dan", "desormais", "maintenant", "role", "jetzt", "rolle", "ahora", "finge*",
		"притворись", "теперь", "роль", "假装", "现在", "扮演",
	},
	11: { // showing hidden text
		"reveal*", "print", "display*", "output", "repeat", "disclose*", "expose", "verbatim", "affiche*", "revele*",
		"zeige*", "ausgeben", "muestra*", "revela*", "выведи*", "покажи*", "раскрой*", "输出", "显示", "告诉",
	},
	12: { // obligation and permission: what the text says the reader must or may do
		"must", "required", "requires", "obliged", "obligat*", "authoris*", "authoriz*", "permitted", "permission",
		"allowed", "entitled", "cleared", "doit", "doivent", "autoris*", "muss", "mussen", "verpflicht*", "erlaubt",
		"berechtigt*", "debe", "deben", "permiso", "autoriza*", "必须", "授权", "允许", "обязан*", "должен", "должны",
		"разреш*",
	},
	13: { // the model's own setup, what an extraction asks for
		"configur*", "config", "setup", "deployer", "deployed", "preprompt", "metaprompt", "directive*", "context",
		"konfigur*", "einstellung*", "configuracion*", "настройк*", "настроил*", "设定", "配置", "设置",
	},
	14: { // reproducing a text in another form
		"translat*", "summar*", "encode*", "reproduc*", "paste", "copy", "recite", "spell", "rewrite", "word-for-word",
		"tradui*", "resum*", "recopie*", "ubersetz*", "zusammenfass*", "wiederhol*", "zitier*", "wortlich", "traduc*",
		"copia*", "literal*", "переведи*", "перескаж*", "повтори*", "дословно", "翻译", "总结", "复述", "逐字",
	},
}

// Kinds of lexicon keys: a whole word, or a prefix cut to 4, 6 or 8 bytes.
const (
	keyWord = iota
	keyPre4
	keyPre6
	keyPre8
)

// Lexicon finds the class of a word from its hashes.
type Lexicon struct {
	slots [1 << 11]lexSlot
	// firsts has a bit for the hash of each entry's first four bytes (of
	// the whole entry when it is shorter).
	firsts [1 << 12 / 64]uint64
}

func (l *Lexicon) maybe(first uint32) bool {
	b := mix(first, 0x1f83d9ab) >> (32 - 12)
	return l.firsts[b/64]&(1<<(b%64)) != 0
}

type lexSlot struct {
	h     uint32
	class uint8
}

// NewLexicon builds the lexicon, putting its words in the scan form with
// normalize (the scanner's Normalize), the way the text they are compared
// with is.
func NewLexicon(normalize func(string) string) *Lexicon {
	if len(classWords) > int(classAddress) {
		panic("ngram: the lexicon's classes overlap classAddress")
	}
	l := &Lexicon{}
	for class, words := range classWords {
		for _, w := range words {
			prefix := strings.HasSuffix(w, "*")
			w = normalize(strings.TrimSuffix(w, "*"))
			kind := keyWord
			if prefix {
				switch {
				case len(w) >= 8:
					w, kind = w[:8], keyPre8
				case len(w) >= 6:
					w, kind = w[:6], keyPre6
				case len(w) >= 4:
					w, kind = w[:4], keyPre4
				}
			}
			h, first := uint32(fnvOffset), uint32(0)
			for i := 0; i < len(w); i++ {
				h = (h ^ uint32(w[i])) * fnvPrime
				if i == 3 {
					first = h
				}
			}
			if len(w) < 4 {
				first = h
			}
			b := mix(first, 0x1f83d9ab) >> (32 - 12)
			l.firsts[b/64] |= 1 << (b % 64)
			l.put(lexKey(h, kind), uint8(class))
		}
	}
	return l
}

func lexKey(h uint32, kind int) uint32 {
	return mix(h, uint32(kind)*0x27d4eb2f+0x165667b1) | 1 // never 0, the empty slot
}

func (l *Lexicon) put(k uint32, class uint8) {
	for i := k; ; i++ {
		s := &l.slots[i&(uint32(len(l.slots))-1)]
		if s.h == 0 || s.h == k {
			*s = lexSlot{k, class}
			return
		}
	}
}

func (l *Lexicon) get(k uint32) uint8 {
	for i := k; ; i++ {
		s := &l.slots[i&(uint32(len(l.slots))-1)]
		if s.h == k {
			return s.class
		}
		if s.h == 0 {
			return 0
		}
	}
}
